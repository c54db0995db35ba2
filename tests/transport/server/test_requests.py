"""A turn request keeps what a device named it with only within bounds, the cut marked."""

from __future__ import annotations

from pipeline.transport.server.requests import (
    MOST_ID_CHARS,
    MOST_TEXT_CHARS,
    MOST_TRACEPARENT_CHARS,
    TurnRequest,
    bounded,
)

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_the_strings_a_device_chose_are_cut_and_the_cut_said() -> None:
    request = TurnRequest("s", "auto", "q" * 780_000, 1, TRACEPARENT, "text", "t" * 1_000_000)
    assert request.question_id == "q" * MOST_ID_CHARS + f"...[{780_000 - MOST_ID_CHARS} more characters]"
    assert request.text == bounded("t" * 1_000_000, MOST_TEXT_CHARS) and len(request.text) < MOST_TEXT_CHARS + 40
    assert request.traceparent == TRACEPARENT  # a W3C one is kept whole


def test_a_trace_context_too_long_to_name_a_span_is_dropped_not_cut() -> None:
    request = TurnRequest("s", "auto", traceparent=TRACEPARENT + "-" + "f" * MOST_TRACEPARENT_CHARS)
    assert request.traceparent == ""


def test_what_the_lab_names_its_questions_with_is_kept_as_it_is() -> None:
    assert TurnRequest("s", "auto", "en03", 2, "", "text", "What time is it?").question_id == "en03"
