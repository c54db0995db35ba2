"""The xiaozhi WebSocket gateway and device emulator over real loopback connections, scripted stages behind.

Each misbehaving connection is closed with a code and reason of its own, its unfinished
turn is recorded with its error, and a well-behaved device on the same server is not touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from pipeline.analysis.read import rows_from_spans
from pipeline.analysis.traces import spans_from_traces_data
from pipeline.clock import RealClock, run_on_clock
from pipeline.endpoints.link.profiles import NetProfile
from pipeline.events import AudioFrame
from pipeline.records.turn_row import TurnRow
from pipeline.run.device_side import Ask
from pipeline.run.turn import ServerStages
from pipeline.tracing.export import Tracing
from pipeline.tracing.timeline import TurnTimeline
from pipeline.transport.device.device import DeviceError, DeviceSettings, EmulatedDevice
from pipeline.transport.device.websocket_link import WebSocketLink
from pipeline.transport.server.requests import TurnRequest
from pipeline.transport.server.server_settings import SessionSettings
from pipeline.transport.server.websocket import WebSocketSettings, start_websocket_server
from pipeline.transport.wire.opus import OpusEncoder
from stages.llm.scripted import ScriptedReply
from tests.scenario import run_virtual, stages, utterance
from tests.wire_helpers import ToneReply, dump, hello, parse

pytestmark = pytest.mark.transport

REPLY = ScriptedReply("Fine, thank you. The weather is sunny today.")
T = TypeVar("T")


def quick_stages() -> ServerStages:
    return stages(REPLY, asr_ms=40, ttft_ms=40, per_token_ms=5, tts_first_ms=20, rtf=0.1)


def clip() -> list[AudioFrame]:
    return utterance(lead_frames=3, speech_frames=10, tail_frames=12)


class ScriptedTurns(ToneReply):
    def __init__(self) -> None:
        self.done: list[tuple[TurnRequest, TurnTimeline]] = []

    def stages(self, request: TurnRequest) -> ServerStages:
        return quick_stages()

    def finished(self, request: TurnRequest, timeline: TurnTimeline) -> None:
        self.done.append((request, timeline))

    async def settled(self, count: int, within_s: float = 10.0) -> None:
        async with asyncio.timeout(within_s):
            while len(self.done) < count:
                await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def gateway(turns: ScriptedTurns, **changes: Any) -> AsyncIterator[str]:
    session = {k: changes.pop(k) for k in list(changes) if k in ("flood", "turn_timeout_s")}
    settings = WebSocketSettings(port=0, session=SessionSettings(**session), **changes)
    server = await start_websocket_server(settings, turns, RealClock())
    async with server:
        port = server.sockets[0].getsockname()[1]
        yield f"ws://127.0.0.1:{port}/xiaozhi/v1/"


def real(coro: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await coro()

    return run_on_clock(main(), RealClock())


def device_rows(timeline: TurnTimeline, tmp: Any) -> list[TurnRow]:
    tracing = Tracing(tmp / "t.jsonl", "test", None)
    line = tracing.emit_turn(timeline, {"lab.schema_version": "1", "lab.question_id": "q1"})
    tracing.shutdown()
    return rows_from_spans(spans_from_traces_data(line))


SPEECH_END_MS = 13 * 60  # the clip: 3 frames of silence, then 10 of speech


def one_turn(turns: ScriptedTurns, question_id: str = "q", round_no: int = 1, **device: Any) -> TurnTimeline:
    """One device turn against a fresh gateway, once the server has finished its side too."""

    async def scenario() -> TurnTimeline:
        async with gateway(turns) as url:
            async with EmulatedDevice(DeviceSettings(url=url, **device), RealClock()) as emulated:
                timeline = await emulated.turn(Ask(clip(), SPEECH_END_MS, question_id, round_no, ""))
            await turns.settled(1)
        return timeline

    return real(scenario)


@pytest.mark.parametrize(("version", "mode"), [(1, "auto"), (2, "manual"), (3, "auto")])
def test_a_turn_over_websocket_hears_and_says_what_the_in_process_turn_does(
    version: int, mode: str, tmp_path: Any
) -> None:
    turns = ScriptedTurns()
    timeline = one_turn(turns, "q1", 2, protocol_version=version, listen_mode=mode)
    in_process = run_virtual(quick_stages(), clip())
    assert timeline.ok, timeline.error_message
    assert timeline.device is not None
    assert timeline.device.transcript == in_process.asr.text == "question"
    assert [text for _, text in timeline.device.sentence_starts] == [s.text for s in in_process.sentences]
    assert timeline.playback.audio_ms == sum(t.audio_ms for t in in_process.tts)
    request, server = turns.done[0]
    assert (request.question_id, request.round, request.mode) == ("q1", 2, mode)
    assert server.ok and [s.text for s in server.sentences] == [s.text for s in in_process.sentences]

    row = device_rows(timeline, tmp_path)[0]
    assert row.ok == 1 and row.transport == "websocket" and row.asr_error_rate is None
    assert row.sentences == len(in_process.sentences)
    # the order a device lives them: heard, first frame in, first sound out, last sound out
    stt, received, audible = row.stt_received_ms, row.first_audio_received_ms, row.first_audible_ms
    assert stt is not None and received is not None and audible is not None
    assert row.first_audio_ms is not None and row.whole_turn_ms is not None
    assert 0 < stt < received <= audible
    assert audible >= row.first_audio_ms and row.whole_turn_ms > audible


def test_the_device_frame_holding_the_end_of_speech_marks_the_users_end(tmp_path: Any) -> None:
    tl = one_turn(ScriptedTurns(), "")
    assert tl.device is not None and tl.vad.user_speech_end_ns is not None and tl.device.first_uplink_ns is not None
    assert tl.device.speech_end_frame == 12  # speech ends at 780 ms: inside frame 12 (720-780 ms)
    # sent 12 frame times after the first at real-time pace; the bound allows a scheduling stall
    assert (tl.vad.user_speech_end_ns - tl.device.first_uplink_ns) / 1e6 == pytest.approx(12 * 60, abs=100)


async def _hello(ws: ClientConnection) -> dict[str, Any]:
    await ws.send(dump(hello()))
    return parse(await ws.recv())


async def _closed(ws: ClientConnection, within_s: float = 5.0) -> tuple[int | None, str]:
    with contextlib.suppress(ConnectionClosed):
        async with asyncio.timeout(within_s):
            while True:
                await ws.recv()
    return ws.close_code, ws.close_reason or ""


async def _start_turn(ws: ClientConnection, session_id: str) -> None:
    await ws.send(dump({"type": "listen", "state": "start", "mode": "auto", "session_id": session_id}))


def _misbehaviours(url: str) -> dict[str, Callable[[], Awaitable[tuple[int | None, str]]]]:
    async def bad_header() -> tuple[int | None, str]:
        async with connect(url, additional_headers={"Protocol-Version": "2"}) as ws:
            await _hello(ws)
            await ws.send(b"\x00\x02\x00\x00 short")  # a version 2 header cut off: dropped and counted
            answer = await _hello(ws)  # the session goes on
            return None, answer["type"]

    async def binary_first() -> tuple[int | None, str]:
        async with connect(url) as ws:
            await ws.send(b"\x01\x02\x03")
            return await _closed(ws)

    async def oversized() -> tuple[int | None, str]:
        async with connect(url, max_size=None) as ws:
            await _hello(ws)
            await ws.send(b"\0" * (2**20 + 1))  # past the 1 MiB limit the real server has too
            return await _closed(ws)

    async def flood() -> tuple[int | None, str]:
        async with connect(url) as ws:
            hello = await _hello(ws)
            for _ in range(400):  # at once: past the control bucket's burst of 200
                await ws.send(dump({"type": "iot", "session_id": hello["session_id"]}))
            return await _closed(ws)

    async def leaves_mid_answer() -> tuple[int | None, str]:
        async with connect(url) as ws:
            hello = await _hello(ws)
            await _start_turn(ws, hello["session_id"])
            encoder = OpusEncoder()
            for frame in clip():
                await ws.send(encoder.encode(frame.pcm))
            while not isinstance(await ws.recv(), bytes):  # the answer's first audio
                pass
        return 1000, "left"

    return {
        "bad_header": bad_header,
        "binary_first": binary_first,
        "oversized": oversized,
        "flood": flood,
        "leaves_mid_answer": leaves_mid_answer,
    }


def test_bad_connections_are_closed_one_by_one_and_a_good_device_beside_them_is_served() -> None:
    turns = ScriptedTurns()

    async def scenario() -> tuple[dict[str, tuple[int | None, str]], TurnTimeline]:
        async with gateway(turns) as url:
            good = EmulatedDevice(DeviceSettings(url=url), RealClock())
            async with good:
                bad = _misbehaviours(url)
                outcomes = asyncio.gather(*(run() for run in bad.values()))
                timeline = await good.turn(Ask(clip(), SPEECH_END_MS, "good", 1, ""))
                closes = dict(zip(bad, await outcomes, strict=True))
            await turns.settled(2)
        return closes, timeline

    closes, good = real(scenario)
    assert good.ok, good.error_message
    assert closes["bad_header"] == (None, "hello")  # still served
    assert closes["binary_first"] == (1002, "binary audio before hello")
    assert closes["oversized"][0] == 1009  # message too big, before it is read
    assert closes["flood"][0] == 1008 and "control messages a second" in closes["flood"][1]
    errors = sorted(tl.error_type for _, tl in turns.done if not tl.ok)
    assert errors == ["disconnected"]  # the device that left mid-answer
    assert [r.question_id for r, tl in turns.done if tl.ok] == ["good"]


def test_unknown_messages_are_tolerated_and_the_session_goes_on() -> None:
    turns = ScriptedTurns()

    async def scenario() -> TurnTimeline:
        async with gateway(turns) as url, EmulatedDevice(DeviceSettings(url=url), RealClock()) as device:
            assert isinstance(device.link, WebSocketLink) and device.link.ws is not None
            for message in (
                {"type": "mcp", "payload": {"jsonrpc": "2.0", "id": 1, "result": {}}},
                {"type": "iot", "descriptors": []},
                {"type": "something-new", "x": 1},
                {"type": "goodbye"},  # over WebSocket a type the real server does not know either
            ):
                await device.link.ws.send(dump(message))
            return await device.turn(Ask(clip(), SPEECH_END_MS, "q", 1, ""))

    assert real(scenario).ok


def test_a_wrong_token_or_path_is_refused_at_the_handshake() -> None:
    turns = ScriptedTurns()

    async def scenario() -> list[str]:
        async with gateway(turns, token="s3cret") as url:
            found = []
            for settings in (DeviceSettings(url=url), DeviceSettings(url=url, token="wrong")):
                with pytest.raises(DeviceError) as refused:
                    async with EmulatedDevice(settings, RealClock()):
                        pass
                found.append(str(refused.value))
            with pytest.raises(InvalidStatus, match="404"):
                async with connect(
                    url.replace("/xiaozhi/v1/", "/other/"), additional_headers={"Authorization": "Bearer s3cret"}
                ):
                    pass
            async with EmulatedDevice(DeviceSettings(url=url, token="s3cret"), RealClock()) as device:
                assert device.session_id
        return found

    refusals = real(scenario)
    assert all("401" in r for r in refusals)
    assert all("s3cret" not in r and "wrong" not in r for r in refusals)


def test_an_unreachable_server_is_a_device_error_naming_it() -> None:
    async def scenario() -> None:
        async with EmulatedDevice(DeviceSettings(url="ws://127.0.0.1:9/xiaozhi/v1/", connect_timeout_s=2), RealClock()):
            pass

    with pytest.raises(DeviceError, match=re.escape("ws://127.0.0.1:9/xiaozhi/v1/: no session")):
        real(scenario)


def test_barge_in_aborts_the_answer_and_the_rows_say_how_fast_it_stopped(tmp_path: Any) -> None:
    turns = ScriptedTurns()
    timeline = one_turn(turns, barge_in_after_ms=300, barge_in_with="button")  # the button: buffer dropped
    full = run_virtual(quick_stages(), clip())
    assert timeline.ok and timeline.device is not None and timeline.device.abort_ns is not None
    assert 0 < timeline.playback.audio_ms < sum(t.audio_ms for t in full.tts)  # cut short
    assert [tl.error_type for _, tl in turns.done] == ["aborted"]  # the server's view of the same turn
    row = device_rows(timeline, tmp_path)[0]
    assert row.whole_turn_ms is None  # the user ended it, not the pipeline
    assert row.interrupt_received_ms is not None and 0 <= row.interrupt_received_ms < 1000  # stopped sending
    # the frame playing at the abort finishes, the rest (over a second of answer) is dropped: 0.7-1.1 ms
    # measured here (the abort falls on a frame boundary); the bound allows one frame and a long stall
    assert row.interrupt_played_ms is not None and 0 <= row.interrupt_played_ms <= 500


def test_barge_in_by_speaking_the_next_question_stops_the_answer_and_the_next_turn_goes_on(tmp_path: Any) -> None:
    turns = ScriptedTurns()
    first, second = Ask(clip(), SPEECH_END_MS, "q1", 1, ""), Ask(clip(), SPEECH_END_MS, "q2", 1, "")

    async def scenario() -> tuple[TurnTimeline, TurnTimeline]:
        async with gateway(turns) as url:
            settings = DeviceSettings(url=url, barge_in_after_ms=300, barge_in_with="speech")
            async with EmulatedDevice(settings, RealClock()) as emulated:
                interrupted = await emulated.turn(first, then=second)
                after = await emulated.turn(second)  # already under way: the user started it mid-answer
            await turns.settled(2)
        return interrupted, after

    interrupted, after = real(scenario)
    full = run_virtual(quick_stages(), clip())
    assert interrupted.ok and interrupted.device is not None and interrupted.device.abort_ns is not None
    assert 0 < interrupted.playback.audio_ms < sum(t.audio_ms for t in full.tts)  # cut short
    # the server saw a new listen mid-answer: the old turn interrupted, the new one answered in full
    assert [tl.error_type for _, tl in turns.done] == ["interrupted", ""]
    assert after.ok and after.device is not None and after.device.abort_ns is None
    assert after.device.transcript == interrupted.device.transcript
    assert after.device.first_uplink_ns is not None and after.device.first_uplink_ns >= interrupted.device.abort_ns
    assert after.playback.audio_ms == sum(t.audio_ms for t in full.tts)  # nothing of the old answer in it
    first_row, second_row = device_rows(interrupted, tmp_path)[0], device_rows(after, tmp_path)[0]
    received, played = first_row.interrupt_received_ms, first_row.interrupt_played_ms
    # a listen start stops no answer (listenMessageHandler.py): the server stops it once it has recognised the
    # next utterance, its tts stop just before the new stt, so after the new question's speech has ended
    assert first_row.whole_turn_ms is None and received is not None and received > SPEECH_END_MS
    assert interrupted.device.tts_stop_ns is not None and after.device.stt_ns is not None
    assert interrupted.device.tts_stop_ns <= after.device.stt_ns
    assert played is not None and 0 <= played <= 500
    assert second_row.whole_turn_ms is not None and second_row.interrupt_received_ms is None


def test_a_link_profile_between_device_and_server_adds_its_delay_to_what_the_device_sees() -> None:
    """100 ms RTT without jitter: the uplink's 50 ms and the downlink's 50 ms are both in the device's figures."""
    slow = NetProfile("test-100ms", rtt_ms=100.0, handshake=False)
    turns = ScriptedTurns()

    async def scenario() -> list[TurnTimeline]:
        out = []
        async with gateway(turns) as url:
            for profile in (None, slow):
                async with EmulatedDevice(DeviceSettings(url=url, profile=profile), RealClock()) as device:
                    out.append(await device.turn(Ask(clip(), SPEECH_END_MS, "q", 1, "")))
        return out

    direct, delayed = real(scenario)
    assert direct.ok and delayed.ok
    assert direct.device is not None and delayed.device is not None

    def first_audio(tl: TurnTimeline) -> float:
        assert tl.device is not None and tl.device.first_audio_received_ns and tl.vad.user_speech_end_ns
        return (tl.device.first_audio_received_ns - tl.vad.user_speech_end_ns) / 1e6

    # measured: +101.5, +101.0 ms quiet, +86.4 ms beside a test suite (the direct turn ran 13 ms slow)
    assert first_audio(delayed) - first_audio(direct) >= 100 - 40
