"""The progress line reaches the operator's terminal: a device's string in it never does so as control characters."""

from __future__ import annotations

from pipeline.analysis.row_sink import printable, progress_line
from pipeline.records.turn_row import TurnRow


def test_escape_sequences_in_a_question_id_or_an_error_are_printed_escaped() -> None:
    """The attack: a question id that set the terminal's title, cleared it and turned it red."""
    ok = TurnRow(question_id="\x1b]0;pwned\x07\x1b[2J\x1b[31mq", round=1, ok=1, llm_calls=1, sentences=1)
    failed = TurnRow(question_id="q2", round=1, ok=0, error="aborted: the device aborted the turn (\x9b2J\u202e)")
    line = progress_line(2, 0, [ok, failed])
    assert line.startswith("[2] round 1 \\x1b]0;pwned\\x07\\x1b[2J\\x1b[31mq: ok")
    assert "(\\x9b2J\\u202e)" in line
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in line)


def test_printable_text_is_left_as_it_is() -> None:
    text = "round 1 zh-天气: ok, whole turn 812.5 ms 😊"
    assert printable(text) == text
    assert printable("a\nb\tc") == "a\\x0ab\\x09c"  # one turn, one line
