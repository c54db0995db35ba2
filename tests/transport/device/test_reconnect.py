"""A device whose connection was lost opens it again on the firmware's backoff, on the virtual clock to the
microsecond: a WebSocket device tries at once, then 10, 20, 40 s after each failure (the firmware's 10 s
doubling), an MQTT one every 10 s (esp-mqtt's reconnect interval); the turn the loss cut is a failed row
``disconnected``, the next question goes on once the server answers again, or is a failed row itself.
Each loss and the time to be answered again are on the device's span."""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

from pipeline.analysis.traces import ReadSpan, spans_from_traces_data
from pipeline.clock import VirtualClock
from pipeline.run.device_side import Ask
from pipeline.tracing import names
from pipeline.tracing.export import Tracing
from pipeline.tracing.timeline import DeviceTiming, TurnTimeline
from pipeline.transport.device.device import DeviceSettings, EmulatedDevice
from pipeline.transport.device.device_settings import FIRMWARE_BACKOFF, Backoff
from tests.server_harness import virtual
from tests.transport.device.far_end import ANSWER, GAP_S, Dialer, FarEnd, Item
from tests.transport.device.test_device_firmware import CLIP, CLOCK, Conn, ask, settings
from tests.transport.server.test_websocket import real
from tests.wire_helpers import dump, hello

S = 1_000_000_000
GAP_NS = round(GAP_S * S)
IDLE: list[Item] = [("sleep", 2.0), ("close", None)]  # two seconds after the answer, the server goes away
CUT: list[Item] = [*ANSWER[:4], ("close", None)]  # mid-answer


def _settings(**changes: Any) -> DeviceSettings:
    base = {"mcp_wait_s": 0.0, "turn_timeout_s": 10.0, "answer_timeout_s": 1.0, "tail_ms": 300}
    return DeviceSettings(url="ws://127.0.0.1:1/", **{**base, **changes})


def _questions(dialer: Dialer, count: int, idle_s: float = 5.0, **changes: Any) -> list[TurnTimeline]:
    """``count`` questions, ``idle_s`` apart, from one device that reaches what ``dialer`` hands it."""

    async def device() -> list[TurnTimeline]:
        turns = []
        async with EmulatedDevice(_settings(**changes), VirtualClock(), dial=dialer) as emulated:
            for n in range(count):
                turns.append(await emulated.turn(Ask(CLIP, 240, f"q{n + 1}", 1, "")))
                await asyncio.sleep(idle_s)
        return turns

    return virtual(device())


def _device(turn: TurnTimeline) -> DeviceTiming:
    assert turn.device is not None
    return turn.device


def test_the_firmware_backoffs_are_10_s_doubling_over_websocket_and_every_10_s_over_mqtt() -> None:
    assert FIRMWARE_BACKOFF["websocket"].delays_s() == [0, 10, 20, 40, 80]  # a try at 310 s would pass 300 s
    assert Backoff(10, 2, 10, give_up_s=10_000).delays_s() == [0, 10, 20, 40, 80, 160, 320, 640, 1280, 2560]
    assert FIRMWARE_BACKOFF["udp"].delays_s() == [0] + [10] * 9
    with pytest.raises(ValueError, match="backoff"):
        Backoff(factor=0.5)


@pytest.mark.parametrize(("transport", "tries_at_s"), [("websocket", [0, 10, 30, 70]), ("udp", [0, 10, 20, 30])])
def test_a_connection_lost_while_idle_is_opened_again_on_the_firmware_backoff_to_the_microsecond(
    transport: str, tries_at_s: list[int]
) -> None:
    dialer = Dialer([FarEnd([[*ANSWER, *IDLE]]), "refused", "refused", "refused", FarEnd([ANSWER])], transport)
    first, second = _questions(dialer, 2)
    assert first.ok and second.ok, (first.error_message, second.error_message)
    back = _device(second).reconnection
    assert back is not None and back.answered_ns is not None
    assert [t - back.woke_ns for t in dialer.opened_ns[1:]] == [s * S for s in tries_at_s]  # each try when due
    assert [(t - back.woke_ns, why) for t, why in back.failed] == [
        (s * S, "ws://127.0.0.1:1/: refused") for s in tries_at_s[:-1]
    ]
    assert back.answered_ns - back.woke_ns == tries_at_s[-1] * S
    # lost 2 s after the first answer ended, told on the second question's row (the first had ended)
    assert _device(first).disconnected_ns is None and _device(second).disconnected_ns == back.lost_ns
    stop_ns, end_ns = _device(first).tts_stop_ns, first.end_ns
    assert stop_ns is not None and end_ns is not None
    assert back.lost_ns == stop_ns + 2 * S + 2 * GAP_NS  # the far end's gap before its pause and before it closed
    assert back.woke_ns == end_ns + 5 * S  # the device tried at its next question, 5 s after the first
    assert (_device(first).reconnects, _device(second).reconnects) == (0, 1)
    assert _device(second).temperature == "cold_connection"


def test_a_turn_the_loss_cuts_is_a_disconnected_row_and_the_next_question_goes_on_after_reconnecting() -> None:
    dialer = Dialer([FarEnd([CUT]), FarEnd([ANSWER])])
    cut, after = _questions(dialer, 2)
    assert cut.error_type == "disconnected" and "the server closed the connection" in cut.error_message
    assert after.ok, after.error_message
    back = _device(after).reconnection
    assert back is not None and back.answered_ns == back.woke_ns and back.failed == []  # answered at the first try
    assert _device(cut).disconnected_ns == back.lost_ns  # the cut row tells of the loss; the next one does not
    assert _device(after).disconnected_ns is None
    assert cut.end_ns is not None and back.lost_ns <= cut.end_ns  # lost in the first turn, which it ended
    assert back.woke_ns == cut.end_ns + 5 * S  # the next question, 5 s later, opened it again at once


def test_a_server_that_never_answers_again_fails_the_question_and_the_next_one_starts_over() -> None:
    dialer = Dialer([FarEnd([[*ANSWER, *IDLE]]), *["gone"] * 5, FarEnd([ANSWER])])
    first, unanswered, third = _questions(dialer, 3)
    assert first.ok and third.ok
    assert unanswered.error_type == "disconnected"
    assert unanswered.error_message == (
        "the server did not answer again: 5 tries in 150 s; the last: ws://127.0.0.1:1/: gone"
    )  # at 0, 10, 30, 70 and 150 s; the next would start at 310 s, past the 300 s the lab waits
    given_up, back = _device(unanswered).reconnection, _device(third).reconnection
    assert given_up is not None and given_up.answered_ns is None and len(given_up.failed) == 5
    assert back is not None and back.failed == [] and back.lost_ns == given_up.lost_ns  # counted from the loss
    assert _device(unanswered).disconnected_ns == given_up.lost_ns and _device(third).disconnected_ns is None


def test_the_loss_the_tries_and_the_time_to_be_answered_again_are_on_the_device_span(tmp_path: Any) -> None:
    dialer = Dialer([FarEnd([[*ANSWER, *IDLE]]), "refused", "refused", FarEnd([ANSWER])])
    _first, second = _questions(dialer, 2)
    back = _device(second).reconnection
    assert back is not None and back.answered_ns is not None
    tracing = Tracing(tmp_path / "t.jsonl", "test", None)
    line = tracing.emit_turn(second, {"lab.schema_version": "1", "lab.question_id": "q2"})
    tracing.shutdown()
    span = next(s for s in spans_from_traces_data(line) if s.name == names.DEVICE)
    a = span.attributes
    assert (a[names.RECONNECTS], a[names.RECONNECT_TRIES]) == (1, 3)
    assert a[names.RECONNECT_MS] == (back.answered_ns - back.lost_ns) / 1e6  # from the loss, idle time and all
    assert a[names.RECONNECT_WAIT_MS] == 30_000
    assert _events(span) == [
        (names.EV_DISCONNECTED, back.lost_ns, ""),
        (names.EV_RECONNECT_FAILED, back.woke_ns, "ws://127.0.0.1:1/: refused"),
        (names.EV_RECONNECT_FAILED, back.woke_ns + 10 * S, "ws://127.0.0.1:1/: refused"),
        (names.EV_RECONNECTED, back.woke_ns + 30 * S, ""),
    ]


def _events(span: ReadSpan) -> list[tuple[str, int, str]]:
    wanted = (names.EV_DISCONNECTED, names.EV_RECONNECT_FAILED, names.EV_RECONNECTED)
    return [
        (e.name, e.time_ns, str(e.attributes.get(names.ERROR_MESSAGE, ""))) for e in span.events if e.name in wanted
    ]


@pytest.mark.transport
def test_a_loopback_server_that_drops_the_connection_mid_turn_is_reconnected_to_and_answers_the_next_question() -> None:
    """End to end on loopback: the server drops the TCP connection mid-answer (as a killed process does), refuses
    the device's first try to come back (503, as a server restarting does), and answers the next question."""
    conns: list[Conn] = []
    handshakes: list[int] = []

    def refuse_the_first_try_back(connection: ServerConnection, request: Request) -> Response | None:
        handshakes.append(CLOCK.now_ns())
        return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "restarting\n") if len(handshakes) == 2 else None

    async def handler(ws: ServerConnection) -> None:
        conn = Conn(ws, len(conns))
        conns.append(conn)
        await conn.next_json("hello")
        await ws.send(dump(hello(session_id=conn.session_id)))
        await conn.next_json("listen")
        await conn.audio(len(CLIP))
        if conn.index == 0:  # mid-answer: the connection is gone, no close frame
            await conn.send({"type": "stt", "text": "question"})
            await conn.send({"type": "tts", "state": "start"})
            await conn.frames(2)
            ws.transport.abort()
            return
        await conn.answer(3)
        await conn.until_closed()

    async def scenario() -> tuple[TurnTimeline, TurnTimeline]:
        quick = Backoff(first_s=0.2, factor=2.0, tries=5)
        async with (
            serve(handler, "127.0.0.1", 0, process_request=refuse_the_first_try_back) as server,
            EmulatedDevice(
                settings(f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/xiaozhi/v1/", backoff=quick), CLOCK
            ) as device,
        ):
            cut = await device.turn(ask("q1"))
            return cut, await device.turn(ask("q2"))

    cut, after = real(scenario)
    assert cut.error_type == "disconnected", cut.error_message
    assert after.ok, after.error_message
    back = _device(after).reconnection
    assert back is not None and back.answered_ns is not None and len(back.failed) == 1
    assert "HTTP 503" in back.failed[0][1]
    assert back.answered_ns - back.failed[0][0] >= 0.2 * S  # the second try came after the backoff's first delay
    assert _device(cut).disconnected_ns == back.lost_ns and _device(after).reconnects == 1
    assert len(handshakes) == 3 and len(conns) == 2 and conns[1].of("listen", "start")[0][1]["session_id"] == "s1"
