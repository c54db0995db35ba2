"""Section 1b, cold and warm turns, on small synthetic rows: exact medians, P90s and counts."""

from __future__ import annotations

from pipeline.records.turn_row import TurnRow
from pipeline.report.build import build
from pipeline.report.document import Heading, Paragraph
from pipeline.report.load import Dataset
from pipeline.report.sections import cold_warm
from pipeline.report.sections.base import Context


class LabelledRow(TurnRow, frozen=True, gc=False):
    """A row with the label the emulator's rows will carry (its name as the report reads it)."""

    turn_temperature: str = ""


def row(question: str, rnd: int, silence: float | None, kind: str, ok: bool = True) -> LabelledRow:
    return LabelledRow(
        run_id="r1",
        condition="B",
        question_id=question,
        round=rnd,
        warmup=int(rnd == 1),
        ok=int(ok),
        transport="websocket",
        first_audible_ms=silence,
        turn_start_ns=rnd * 1000 + int(question[1:]),
        device=0,
        turn_temperature=kind,
    )


ROWS = [
    row("q1", 1, 3000.0, "cold_connection"),
    row("q2", 1, 900.0, "warm"),
    row("q1", 2, 2500.0, "cold_wake"),
    row("q2", 2, 1100.0, "warm"),
    row("q1", 3, 1000.0, "warm"),
    row("q2", 3, None, "warm", ok=False),  # failed: not among the successful turns
    row("q3", 3, None, "warm"),  # successful, no audible answer: counted, no silence
]


def test_cold_and_warm_silences_side_by_side() -> None:
    doc = build(Dataset.of_rows(ROWS, "test"), draw=False)
    t = doc.table("cold-warm")
    assert t.rows == (
        ("B (local)", "cold: the first turn of a connection", "3000.0", "3000.0", "1/1", "1", "measured"),
        ("B (local)", "cold: a turn after a wake word", "2500.0", "2500.0", "1/1", "0", "measured"),
        ("B (local)", "warm", "1000.0", "1080.0", "⚠ 3/4", "1", "measured"),
    )
    headings = [b.text for b in doc.blocks if isinstance(b, Heading)]
    assert headings.index(cold_warm.HEADING) == headings.index("1. Result (M23)") + 1


def test_rows_without_the_label_say_the_run_did_not_label_them() -> None:
    plain = [TurnRow(run_id="r1", condition="B", question_id="q1", round=2, ok=1, first_audio_ms=800.0)]
    blocks = cold_warm.section(Context(Dataset.of_rows(plain, "test"), draw=False))
    assert len(blocks) == 2 and isinstance(blocks[1], Paragraph)
    assert "These runs did not label their turns cold or warm (their rows have no `turn_temperature`)" in blocks[1].text


def test_an_unknown_label_is_shown_as_given_and_unlabelled_rows_apart() -> None:
    rows = [row("q1", 2, 700.0, "lukewarm"), row("q2", 2, 500.0, "")]
    assert [r[1] for r in cold_warm.cold_warm_rows("B", rows)] == [cold_warm.UNLABELLED, "lukewarm"]
