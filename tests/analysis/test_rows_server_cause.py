"""A device's failed row read beside its server's traces names the server's cause (``server_error``): what the
device saw (``error``) is a symptom, the server's row says why."""

from __future__ import annotations

from pipeline.analysis.read import rows_from_spans
from pipeline.analysis.traces import ReadSpan
from pipeline.tracing import names

S = 1_000_000_000


def span(name: str, span_id: str, parent: str, **attributes: object) -> ReadSpan:
    attrs = {names.SCHEMA: names.SCHEMA_VERSION, **attributes} if name == names.TURN else attributes
    return ReadSpan("t" * 32, span_id, parent, name, 10 * S, 12 * S, attrs, ())  # type: ignore[arg-type]


def device_turn(server_ok: bool, server_error: str = "") -> list[ReadSpan]:
    """A device's failed turn, its ``device`` span, and its server's turn a child of it (the ``traceparent``)."""
    server = {names.OK: server_ok} | ({names.ERROR_TYPE: server_error} if server_error else {})
    return [
        span(names.TURN, "d" * 16, "", **{names.OK: False, names.ERROR_TYPE: "no_audio_out", names.QUESTION_ID: "q1"}),
        span(names.DEVICE, "e" * 16, "d" * 16),
        span(names.TURN, "f" * 16, "d" * 16, **server, **{names.QUESTION_ID: "q1"}),
    ]


def rows_by_span(spans: list[ReadSpan]) -> tuple[str, str]:
    rows = rows_from_spans(spans)
    device = next(r for r in rows if r.error == "no_audio_out")
    return device.error, device.server_error


def test_a_device_row_names_the_servers_error_as_its_cause() -> None:
    assert rows_by_span(device_turn(False, "LlmHttpError")) == ("no_audio_out", "LlmHttpError")
    assert rows_by_span(device_turn(False)) == ("no_audio_out", "unknown")  # failed, and said no more


def test_no_cause_where_the_server_succeeded_or_was_not_read() -> None:
    assert rows_by_span(device_turn(True)) == ("no_audio_out", "")
    assert rows_by_span(device_turn(False, "LlmHttpError")[:2]) == ("no_audio_out", "")  # the device's file alone
