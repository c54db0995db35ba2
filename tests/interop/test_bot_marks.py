"""A bot's own marks beside what its caller heard (``interop.bot_marks``): each turn takes the marks inside it,
from its user's end of speech to the next turn's start, exactly; a line of the bot's log that does not read is
named, the rest kept."""

from __future__ import annotations

from pathlib import Path

import msgspec

from pipeline.analysis.traces import AttrValue, ReadEvent, ReadProblems, ReadSpan
from pipeline.interop.bot_marks import BotMark, TurnBeside, beside, heard_turns, markdown, read_marks, told_marks
from pipeline.tracing import names

MS = 1_000_000
T0 = 1_800_000_000_000_000_000


def turn(n: int, start_ms: int, end_ms: int, first_ms: int, last_ms: int, warmup: bool = False) -> list[ReadSpan]:
    attrs: dict[str, AttrValue] = {names.SCHEMA: names.SCHEMA_VERSION, names.QUESTION_ID: f"q{n}", names.WARMUP: warmup}
    ends = (ReadEvent(names.EV_USER_SPEECH_END, T0 + end_ms * MS),)
    top = ReadSpan("t", f"turn{n}", "", names.TURN, T0 + start_ms * MS, T0 + last_ms * MS, attrs, ends)
    heard = (ReadEvent(names.EV_FIRST_AUDIBLE, T0 + first_ms * MS), ReadEvent(names.EV_LAST_AUDIBLE, T0 + last_ms * MS))
    device = ReadSpan("t", f"dev{n}", f"turn{n}", names.DEVICE, T0 + start_ms * MS, T0 + last_ms * MS, {}, heard)
    return [device, top]


def mark(ms: int, event: str) -> BotMark:
    return BotMark(T0 + ms * MS, "MZ1", event)


def test_each_turn_takes_the_bot_marks_inside_it() -> None:
    spans = [*turn(1, 0, 2000, 3100, 5000, warmup=True), *turn(2, 6000, 8000, 9050, 10000)]
    marks = [
        mark(1500, "user_stopped_speaking"),  # a pause mid-question: the bot changed its mind
        mark(1700, "user_started_speaking"),
        mark(2300, "user_stopped_speaking"),  # the decision that stood
        mark(3000, "bot_started_speaking"),
        mark(4990, "bot_stopped_speaking"),
        mark(8400, "user_stopped_speaking"),
        mark(9000, "bot_started_speaking"),
        mark(9500, "bot_stopped_speaking"),  # two sentences: the last stop is the answer's end
        mark(9600, "bot_started_speaking"),
        mark(9980, "bot_stopped_speaking"),
    ]
    found = beside(heard_turns(spans, ReadProblems()), marks)
    assert found == [
        TurnBeside("q1", True, 300.0, 1000.0, 1100.0, 2990.0, 3000.0),
        TurnBeside("q2", False, 400.0, 1000.0, 1050.0, 1980.0, 2000.0),
    ]
    assert [t.unseen_ms for t in found] == [100.0, 50.0]
    text = markdown(found, "pipecat bot")
    assert "| q1 (warm-up) | 300 | 1000 | 1100 | 100 | 2990 | 3000 |" in text
    assert "| median (measured) | 400 | 1000 | 1050 | 50 | 1980 | 2000 |" in text


def test_a_turn_the_bot_never_answered_has_no_marks_of_its_own() -> None:
    spans = turn(1, 0, 2000, 3000, 4000)
    found = beside(heard_turns(spans, ReadProblems()), [mark(500, "bot_started_speaking")])  # before speech ended
    assert found == [TurnBeside("q1", False, None, None, 1000.0, None, 2000.0)]
    assert found[0].unseen_ms is None


def test_a_line_that_does_not_read_is_named_and_the_rest_kept(tmp_path: Path) -> None:
    log = tmp_path / "bot-events.jsonl"
    log.write_text(
        '{"t_ns": 20, "stream": "MZ1", "event": "bot_started_speaking"}\nnot json\n'
        '{"t_ns": 10, "stream": "MZ1", "event": "user_stopped_speaking"}\n{"stream": "MZ1"}\n',
        encoding="utf-8",
    )
    problems: list[str] = []
    assert read_marks(log, problems) == [
        BotMark(10, "MZ1", "user_stopped_speaking"),
        BotMark(20, "MZ1", "bot_started_speaking"),
    ]
    assert [p.split(": ")[0] for p in problems] == [f"{log}:2", f"{log}:4"]


def test_the_marks_pipecats_wire_told_the_caller_are_read_from_its_device_spans() -> None:
    def told(ms: int, kind: str) -> ReadEvent:
        return ReadEvent(names.EV_BOT_MARK, T0 + ms * MS, {names.BOT_MARK: kind})

    device, top = turn(1, 0, 2000, 3010, 5000)
    events = (told(2400, "user-stopped-speaking"), told(2450, "bot-llm-started"), told(3000, "bot-started-speaking"))
    device = msgspec.structs.replace(device, events=(*device.events, *events, told(4900, "bot-stopped-speaking")))
    marks = told_marks([device, top])
    assert [m.event for m in marks] == ["user_stopped_speaking", "bot_started_speaking", "bot_stopped_speaking"]
    found = beside(heard_turns([device, top], ReadProblems()), marks)
    assert found == [TurnBeside("q1", False, 400.0, 1000.0, 1010.0, 2900.0, 3000.0)]
