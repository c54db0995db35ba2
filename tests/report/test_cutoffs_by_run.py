"""turns.md: each run a setting of its own, scored against the truth, from synthetic device rows (exact numbers)."""

from __future__ import annotations

from pipeline.records.turn_row import TurnRow
from pipeline.report.cutoffs import setting_from
from pipeline.report.cutoffs_by_run import RunScore, scored, turns_markdown

SHIPPED, LONGER, LAB = "real server, VAD 200 ms shipped, A", "real server, VAD 800 ms, A", "lab server, VAD 200 ms, A"


def turn(
    question: str,
    cut: int | None,
    true_end: float | None,
    device_end: float | None,
    by: str = "stt",
    ok: int = 1,
    warmup: int = 0,
) -> TurnRow:
    return TurnRow(
        run_id="r",
        condition="A",
        config_id="device",  # every device run shares one config: the rows are grouped by run
        question_id=question,
        round=1 if warmup else 2,
        warmup=warmup,
        ok=ok,
        transport="websocket",
        cut_off=cut,
        cut_off_by=by if cut is not None else "",
        true_end_first_audible_ms=true_end,
        first_audible_ms=device_end,
    )


def real_shipped() -> list[TurnRow]:
    return [
        turn("q1", 1, -500.0, 300.0),  # answered while the user was still speaking
        turn("q2", 0, 800.0, 600.0),
        turn("q3", 0, 1000.0, 700.0),
        turn("q4", 1, None, None, ok=0),  # failed: counted as cut off, no silence
        turn("q1", 0, 5000.0, 5000.0, warmup=1),  # the warm-up: left out
        turn("q5", None, None, 400.0),  # no truth: neither cut off nor not
    ]


def real_longer() -> list[TurnRow]:
    return [
        turn(q, 0, t, d)
        for q, t, d in (("q1", 1200.0, 900.0), ("q2", 1300.0, 1000.0), ("q3", 1400.0, 1100.0), ("q4", 1500.0, 1200.0))
    ]


def lab_declared() -> list[TurnRow]:
    values = (("q1", 1, -300.0, 200.0), ("q2", 0, 1300.0, 1000.0), ("q3", 0, 1500.0, 1200.0), ("q4", 0, 1600.0, 1300.0))
    return [turn(q, c, t, d, by="declared") for q, c, t, d in values]


def lab_own() -> list[TurnRow]:
    """The same turns as the device alone scores them: q3 seen as cut off (two stt messages, say)."""
    values = (("q1", 1), ("q2", 0), ("q3", 1), ("q4", 0))
    return [turn(q, c, None, None) for q, c in values] + [turn("q2", 1, None, None, warmup=1)]


def test_a_turn_the_device_cannot_score_is_counted_apart() -> None:
    # no stt in q4's turn: the device alone has no score for it, the declared end-point has
    own = [r for r in lab_own() if r.question_id != "q4"] + [turn("q4", None, None, None, ok=0)]
    assert scored(LAB, "A", lab_declared(), own, None).agreement == (2, 3, 4)


def scores() -> list[RunScore]:
    return [
        scored(SHIPPED, "A", real_shipped(), None, None),
        scored(LAB, "A", lab_declared(), lab_own(), None),
        scored(LONGER, "A", real_longer(), None, SHIPPED),
        scored("real server, B", "B", [turn("q1", None, None, 400.0)], None, None, ["a line that could not be read"]),
    ]


def test_the_builder_counts_only_measured_turns_with_a_truth() -> None:
    setting = setting_from("A", "device", SHIPPED, real_shipped())
    assert (setting.cut.successes, setting.cut.n, len(setting.rows)) == (2, 4, 4)
    assert list(setting.true_end) == [-500.0, 800.0, 1000.0] and setting.silence == 800.0
    assert list(setting.pipeline_end) == [300.0, 600.0, 700.0]


def test_each_run_is_scored_with_how_its_cut_offs_were_seen_and_the_inference_checked() -> None:
    shipped, lab, longer, none = scores()
    assert shipped.seen_by == (("stt", 4),) and shipped.agreement is None
    assert lab.seen_by == (("declared", 4),) and lab.agreement == (3, 4, 4)
    assert longer.against == SHIPPED
    assert none.setting is None


def test_the_table_sentences_and_check_in_exact_numbers() -> None:
    text = turns_markdown(scores(), "# intro\n\n")
    lines = text.splitlines()
    assert lines[0] == "# intro"
    assert lines[4:8] == [
        f"| {SHIPPED} | 4 | 50.0 % (2 of 4) | 15.0-85.0 % | stt 4 | 800 | 960 | 600 | 680 | yes |",
        # beaten on both by the longer wait (0 % cut off, 1350 ms): off the frontier
        f"| {LAB} | 4 | 25.0 % (1 of 4) | 4.6-69.9 % | declared 4 | 1400 | 1570 | 1100 | 1270 | no |",
        f"| {LONGER} | 4 | 0.0 % (0 of 4) | 0.0-49.0 % | stt 4 | 1350 | 1470 | 1050 | 1170 | yes |",
        "| real server, B | 0 | - | - | - | - | - | - | - | - |",
    ]
    assert (
        f"- {LONGER} against {SHIPPED}: cut off 0.0 % (0 of 4) instead of 50.0 % (2 of 4) (the intervals overlap: "
        "not told apart at this many turns); median silence from the true end 1350 ms instead of 800 ms (+550 ms)."
    ) in lines
    assert (
        f"- {LAB}: of 4 turn(s) the server's declared end-point scores, the device's own inference from `stt` "
        "scores 4, 3 of them alike."
    ) in lines
    assert lines[-1] == "- real server, B: a line that could not be read"
