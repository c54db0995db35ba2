"""Section 1d, what the silence costs, on small synthetic rows with a truth: the cut-off rates and their Wilson
intervals against hand-computed values, the frontier, the words; nothing where no row carries a truth; and the
result table's sentence for two conditions whose cut-off rates' intervals do not overlap."""

from __future__ import annotations

import json
import re

import pytest

from pipeline.records.turn_row import TurnRow
from pipeline.report.build import build
from pipeline.report.cutoffs import end_settings
from pipeline.report.document import Document, Figure, Heading, Paragraph
from pipeline.report.load import Dataset, RunInfo
from pipeline.report.sections import cold_warm, endpoint_cost
from pipeline.report.sections.base import Context

SMART = {"impl": "smart-turn", "inner": "silero", "inner_silence_ms": 200, "max_silence_ms": 3000}
VADS = {"c300": {"impl": "silero", "silence_ms": 300}, "c600": {"impl": "silero", "silence_ms": 600}, "c900": SMART}


def turn(config: str, i: int, cut: bool, true_end: float | None, found: float | None, delay: float) -> TurnRow:
    """A measured, successful in-process turn of run ``r-<config>`` whose question carries a truth."""
    return TurnRow(
        run_id=f"r-{config}",
        condition="B",
        config_id=config,
        question_id=f"q{i}",
        round=2,
        ok=1,
        turn_start_ns=i,
        first_audio_ms=found,
        cut_off=int(cut),
        utterances=2 if cut else 1,
        endpoint_delay_ms=delay,
        true_end_first_audio_ms=true_end,
    )


def setting(config: str, cuts: int, true_end0: float, found0: float, delay: float) -> list[TurnRow]:
    """Ten turns, the first ``cuts`` cut off (their end-point 100 ms before the true end), silences 20 ms (true
    end) and 10 ms (the pipeline's end of speech) apart; and a warm-up turn with a truth, left out."""
    rows = [
        turn(config, i, i < cuts, true_end0 + 20 * i, found0 + 10 * i, -100.0 if i < cuts else delay) for i in range(10)
    ]
    warm = turn(config, 0, True, 1.0, 1.0, -500.0)
    return [*rows, TurnRow(**{**{f: getattr(warm, f) for f in warm.__struct_fields__}, "round": 1, "warmup": 1})]


def runs() -> dict[str, RunInfo]:
    return {f"r-{c}": RunInfo(f"r-{c}", "B", (c,), json.dumps({"vad": vad}), 1) for c, vad in VADS.items()}


def three_settings() -> list[TurnRow]:
    rows = setting("c300", 4, 400.0, 300.0, 300.0)
    rows[9] = TurnRow(**{**{f: getattr(rows[9], f) for f in rows[9].__struct_fields__}, "ok": 0, "error": "timeout"})
    rows += setting("c600", 1, 800.0, 200.0, 600.0)
    rows += setting("c900", 2, 1200.0, 250.0, 900.0)
    # two measured turns without a truth: never counted as not cut off
    rows += [
        TurnRow(run_id="r-c600", condition="B", config_id="c600", question_id=f"x{i}", round=2, ok=1) for i in (1, 2)
    ]
    return rows


def headings(doc: Document) -> list[str]:
    return [b.text for b in doc.blocks if isinstance(b, Heading)]


def test_the_frontier_on_rows_with_a_truth() -> None:
    data = Dataset.of_rows(three_settings(), "test", runs=runs())
    found = end_settings(data)
    assert [s.label for s in found] == [
        "silero, silence 300 ms",
        "silero, silence 600 ms",
        "smart-turn on silero, pause 200 ms, at most 3000 ms",
    ]
    # Wilson score intervals, by hand: p = k/n, z = 1.95996, (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)
    assert [(s.cut.successes, s.cut.n) for s in found] == [(4, 10), (1, 10), (2, 10)]
    assert [(round(s.cut.low, 4), round(s.cut.high, 4)) for s in found] == [
        (0.1682, 0.6873),
        (0.0179, 0.4042),
        (0.0567, 0.5098),
    ]
    assert [s.silence for s in found] == [480.0, 890.0, 1290.0]  # c300's failed turn has no silence

    doc = build(data, draw=False)
    assert headings(doc).index(endpoint_cost.HEADING) > headings(doc).index(cold_warm.HEADING)
    table = doc.table("endpoint-cost")
    assert table.headers == endpoint_cost.HEADERS
    c300, c600, c900 = table.rows
    assert c300[:3] == ("silero, silence 300 ms", "10", "40.0% [16.8-68.7] · 4/10")
    assert c300[3].startswith("480.0 [") and c300[3].endswith("· ⚠ 9/10")  # M7: over 9 of the 10 turns
    assert c300[4].startswith("544.0 [")  # P90 of 400, 420 ... 560
    assert c300[5].startswith("340.0 [") and c300[6].startswith("372.0 [")  # from the pipeline's end of speech
    assert c300[7].startswith("300.0 [")  # end-point delay: four at -100, six at 300
    assert c300[8:] == ("1.40 · 10/10", "yes", "measured")
    assert c600[2] == "10.0% [1.8-40.4] · 1/10" and c600[3].startswith("890.0 [") and c600[9] == "yes"
    assert c900[2] == "20.0% [5.7-51.0] · 2/10"
    assert c900[9] == "no: silero, silence 600 ms beats it"

    text = doc.text()
    assert (
        "Waiting 410 ms longer (silero, silence 300 ms -> silero, silence 600 ms) cuts off 30 fewer users in 100 "
        "(from 40.0% to 10.0%); their 95% intervals overlap: these turns do not show the difference to be real."
    ) in text
    assert (
        "Off the frontier (another setting cuts off fewer users and answers sooner): smart-turn on silero, pause "
        "200 ms, at most 3000 ms (beaten by silero, silence 600 ms)."
    ) in text
    assert (
        "Measured from the end of speech each setting found, silero, silence 600 ms looks quickest (silence median "
        "245 ms); measured from where the user really finished, its median is 890 ms, and it cuts off 10.0% "
        "[1.8-40.4] of the questions."
    ) in text
    assert "2 measured turn(s) carry no truth (their question has none)" in text
    assert "this one compares exactly that" in text  # the other sections refuse: the VAD settings differ (M11)
    assert "Cuts seen by the device alone" not in text  # every cut here was declared on a VAD span


def test_cuts_a_device_saw_alone_are_said_to_be_lower_bounds() -> None:
    def seen_in_stt(r: TurnRow) -> TurnRow:
        by = "stt" if r.run_id == "r-c600" and r.cut_off is not None else ""
        return TurnRow(**{**{f: getattr(r, f) for f in r.__struct_fields__}, "cut_off_by": by})

    rows = [seen_in_stt(r) for r in three_settings()]
    text = build(Dataset.of_rows(rows, "test", runs=runs()), draw=False).text()
    assert "Cuts seen by the device alone (silero, silence 600 ms): its server writes no spans" in text
    assert "That can miss a cut, and take an earlier exchange's late text for one" in text


def test_the_figure_is_drawn_the_same_twice() -> None:
    def figure() -> Figure:
        doc = build(Dataset.of_rows(three_settings(), "test", runs=runs()), draw=True)
        return next(f for f in doc.figures() if f.key == "endpoint-frontier")

    first = figure()
    assert first.png.startswith(b"\x89PNG") and first.png == figure().png


def test_a_setting_that_wins_both_and_one_that_trades() -> None:
    rows = setting("c300", 6, 400.0, 300.0, 300.0) + setting("c600", 0, 400.0, 300.0, 600.0)
    blocks = endpoint_cost.section(Context(Dataset.of_rows(rows, "test", runs=runs()), draw=False))
    text = "\n".join(b.text for b in blocks if isinstance(b, Paragraph))
    # same silence, fewer cut off: c600 beats c300 on one and ties the other, so a tie beats nothing
    assert "At the same median silence from the true end (490 ms), silero, silence 600 ms cuts off 60 fewer" in text
    assert "(from 60.0% to 0.0%)." in text  # [0.0-27.8] and [31.3-83.2]: they do not overlap

    alone = endpoint_cost.section(Context(Dataset.of_rows(setting("c900", 2, 1200.0, 250.0, 900.0), "t"), False))
    said = [b.text for b in alone if isinstance(b, Paragraph)]
    assert "One setting: config c900 (VAD not recorded): 20.0% [5.7-51.0] cut off, silence from the true end " in (
        "\n".join(said)
    )


NO_TRUTH = [
    TurnRow(run_id="r1", condition=c, question_id=f"q{i}", round=2, ok=1, first_audio_ms=900.0, turn_start_ns=i)
    for c in ("A", "B")
    for i in range(4)
]


def _zero_percent(doc: Document) -> list[str]:
    cells = [cell for t in doc.table_keys() for row in doc.table(t).rows for cell in row]
    zero = re.compile(r"(?<![\d.])0(\.0+)?\s?%")
    return [text for text in [doc.text(), *cells] if zero.search(text)]


def test_no_section_where_no_row_carries_a_truth() -> None:
    doc = build(Dataset.of_rows(NO_TRUTH, "test"), draw=True)
    assert endpoint_cost.HEADING not in headings(doc)
    assert "endpoint-cost" not in doc.table_keys()
    assert all(f.key != "endpoint-frontier" for f in doc.figures())
    assert "cut off" not in doc.text()
    assert _zero_percent(doc) == []
    assert endpoint_cost.section(Context(Dataset.of_rows(NO_TRUTH, "test"), draw=False)) == []


def conditions(cut_a: int, cut_b: int, n: int) -> list[TurnRow]:
    return [
        TurnRow(
            run_id=f"r{c}",
            condition=c,
            question_id=f"q{i}",
            round=2,
            ok=1,
            first_audio_ms=700.0 if c == "B" else 900.0,
            cut_off=int(i < (cut_b if c == "B" else cut_a)),
            true_end_first_audio_ms=1300.0,
            turn_start_ns=i,
        )
        for c in ("A", "B")
        for i in range(n)
    ]


def result_paragraphs(rows: list[TurnRow]) -> list[str]:
    doc = build(Dataset.of_rows(rows, "test"), draw=False)
    start = doc.blocks.index(doc.table("result"))
    end = next(i for i, b in enumerate(doc.blocks) if isinstance(b, Heading) and i > start)
    return [b.text for b in doc.blocks[start:end] if isinstance(b, Paragraph)]


@pytest.mark.parametrize(
    ("cut_a", "cut_b", "n", "said"),
    [
        # 0/20: [0.0, 16.1]; 12/20: [38.7, 78.1]
        (0, 12, 20, "B (local) also cuts off more users: 60.0% [38.7-78.1] against 0.0% [0.0-16.1] for A (cloud)"),
        (12, 0, 20, "A (cloud) also cuts off more users: 60.0% [38.7-78.1] against 0.0% [0.0-16.1] for B (local)"),
        (1, 3, 10, None),  # 1/10 [1.8, 40.4] and 3/10 [10.8, 60.3] overlap
    ],
)
def test_the_result_table_says_a_condition_also_cuts_off_more(cut_a: int, cut_b: int, n: int, said: str | None) -> None:
    found = [p for p in result_paragraphs(conditions(cut_a, cut_b, n)) if "cuts off" in p]
    if said is None:
        assert found == []
        return
    assert len(found) == 1 and found[0].startswith(said)
    assert found[0].endswith(
        "of the questions with a truth (95% Wilson intervals that do not overlap): part of its silence above is "
        'measured from an end of speech found before the user finished (see section 1d, "What the silence costs").'
    )


def test_no_comparison_sentence_without_a_truth() -> None:
    assert [p for p in result_paragraphs(NO_TRUTH) if "cuts off" in p] == []
