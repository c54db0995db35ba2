"""The lab's server against message transcripts of the real firmware and clients (docs/reference/xiaozhi-protocol.md).

Each test plays one device's side of the protocol over a real loopback WebSocket, message by
message as the firmware (github:78/xiaozhi-esp32 application.cc) or a desktop client sends
them, and checks what the server answers and records, in the order the real server
(xiaozhi-esp32-server) would: continuous listening in realtime mode, 20 ms frames, abort
answered at once, manual mode ended by ``listen stop``, typed text and wake words, bad
packets dropped, a repeated hello.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import opuslib_next as opus
import pytest
from websockets.asyncio.client import ClientConnection, connect

from pipeline.clock import RealClock, run_on_clock
from pipeline.events import FRAME_SAMPLES, LatencyProfile
from pipeline.run.turn import ServerStages
from pipeline.tracing.timeline import TurnTimeline
from pipeline.transport.server.requests import TurnRequest
from pipeline.transport.server.server_settings import SessionSettings
from pipeline.transport.server.websocket import WebSocketSettings, start_websocket_server
from stages.asr.oracle import OracleAsr
from stages.llm.scripted import ScriptedReply
from tests.scenario import SILENCE, TONE, stages
from tests.wire_helpers import ToneReply, dump, parse

pytestmark = pytest.mark.transport

REPLY = ScriptedReply("Fine, thank you. The weather is sunny today.")
CLIP = [SILENCE] * 3 + [TONE] * 10 + [SILENCE] * 12  # 60 ms frames; the VAD end-points 600 ms after the tone


class Turns(ToneReply):
    """Scripted stages behind the gateway; each finished turn kept with its request."""

    def __init__(self, empty_first: bool = False) -> None:
        self.done: list[tuple[TurnRequest, TurnTimeline]] = []
        self.built = 0
        self.empty_first = empty_first
        self.ended_sessions: list[str] = []

    def stages(self, request: TurnRequest) -> ServerStages:
        self.built += 1
        built = stages(REPLY, asr_ms=40, ttft_ms=40, per_token_ms=5, tts_first_ms=20, rtf=0.1)
        if self.empty_first and self.built == 1:  # the first utterance is recognised as nothing
            built = ServerStages(
                built.vad, OracleAsr("", "en", LatencyProfile(40)), built.llm, built.sentences, built.tts
            )
        return built

    def finished(self, request: TurnRequest, timeline: TurnTimeline) -> None:
        self.done.append((request, timeline))

    def ended(self, session_id: str) -> None:
        self.ended_sessions.append(session_id)

    async def settled(self, count: int, within_s: float = 15.0) -> None:
        async with asyncio.timeout(within_s):
            while len(self.done) < count:
                await asyncio.sleep(0.02)


class Device:
    """One device's side of the wire: what it sent and everything it received, stamped."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.received: list[tuple[float, dict[str, Any] | bytes]] = []
        self.reader = asyncio.create_task(self._read())
        self.session_id = ""

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for message in self.ws:
                item = parse(message) if isinstance(message, str) else message
                self.received.append((time.monotonic(), item))

    def messages(self, kind: str | None = None, state: str | None = None) -> list[dict[str, Any]]:
        return [
            m
            for _, m in self.received
            if isinstance(m, dict)
            and (kind is None or m["type"] == kind)
            and (state is None or m.get("state") == state)
        ]

    def stopped(self, count: int) -> Callable[[], bool]:
        """Whether ``count`` answers have been stopped (``tts stop``) so far."""
        return lambda: len(self.messages("tts", "stop")) >= count

    async def until(self, test: Callable[[], bool], within_s: float = 10.0) -> None:
        async with asyncio.timeout(within_s):
            while not test():
                await asyncio.sleep(0.01)

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(dump({**message, "session_id": self.session_id}))

    async def hello(self, frame_ms: int = 60, **extra: Any) -> dict[str, Any]:
        params = {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": frame_ms}
        count = len(self.messages("hello"))
        await self.ws.send(
            dump({"type": "hello", "version": 1, "transport": "websocket", "audio_params": params, **extra})
        )
        await self.until(lambda: len(self.messages("hello")) > count)
        answer = self.messages("hello")[-1]
        self.session_id = answer["session_id"]
        return answer

    async def speak(self, frames: Sequence[bytes], frame_ms: int = 60, gap_s: float = 0.005) -> None:
        """60 ms PCM frames sent as packets of ``frame_ms``, faster than real time (the VAD counts audio time)."""
        encoder = opus.Encoder(16000, 1, opus.APPLICATION_AUDIO)
        size = FRAME_SAMPLES * frame_ms // 60
        pcm = b"".join(frames)
        for start in range(0, len(pcm) - size * 2 + 1, size * 2):
            await self.ws.send(bytes(encoder.encode(pcm[start : start + size * 2], size)))
            await asyncio.sleep(gap_s * frame_ms / 60)

    async def stream_until(self, test: Callable[[], bool], within_s: float = 15.0) -> None:
        """Keep the microphone on (silence) until ``test`` holds, as a listening device does."""
        async with asyncio.timeout(within_s):
            while not test():
                await self.speak([SILENCE], gap_s=0.02)


@contextlib.asynccontextmanager
async def device(turns: Turns, **session: Any) -> AsyncIterator[Device]:
    settings = WebSocketSettings(port=0, session=SessionSettings(**session))
    server = await start_websocket_server(settings, turns, RealClock())
    async with server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}/xiaozhi/v1/", compression=None) as ws:
            dev = Device(ws)
            yield dev
            dev.reader.cancel()


def real(scenario: Callable[[], Any]) -> Any:
    async def main() -> Any:
        return await scenario()

    return run_on_clock(main(), RealClock())


def test_realtime_mode_answers_three_questions_after_one_listen_start_in_order() -> None:
    turns = Turns()

    async def scenario() -> Device:
        async with device(turns) as dev:
            await dev.hello()
            await dev.send({"type": "listen", "state": "start", "mode": "realtime"})
            for n in (1, 2, 3):
                await dev.send({"type": "lab", "state": "question", "question_id": f"q{n}", "round": 1})
                await dev.speak(CLIP)
                await dev.stream_until(dev.stopped(n))
            await turns.settled(3)
            return dev

    dev = real(scenario)
    assert [r.question_id for r, _ in turns.done] == ["q1", "q2", "q3"]
    assert all(tl.ok for _, tl in turns.done), [tl.error_message for _, tl in turns.done]
    assert [r.started_by for r, _ in turns.done] == ["speech"] * 3  # each named by its lab message, heard by the VAD
    assert [m["text"] for m in dev.messages("stt")] == ["question"] * 3
    # each answer whole: stt, tts start, sentence starts, its stop, before the next question's stt
    order = [
        (m["type"], m.get("state")) for _, m in dev.received if isinstance(m, dict) and m["type"] in ("stt", "tts")
    ]
    starts = [i for i, kind in enumerate(order) if kind == ("stt", None)]
    stops = [i for i, kind in enumerate(order) if kind == ("tts", "stop")]
    assert starts[0] < stops[0] < starts[1] < stops[1] < starts[2] < stops[2]
    assert turns.ended_sessions == [dev.session_id]  # what the server kept for the session can go with it


def test_a_client_that_names_no_question_is_answered_in_realtime_mode_too() -> None:
    turns = Turns()

    async def scenario() -> None:
        async with device(turns) as dev:
            await dev.hello(frame_ms=20)
            await dev.send({"type": "listen", "state": "start", "mode": "realtime"})
            for n in (1, 2):
                await dev.speak(CLIP, frame_ms=20)
                await dev.stream_until(dev.stopped(n))
            await turns.settled(2)

    real(scenario)
    assert [tl.ok for _, tl in turns.done] == [True, True]


def test_twenty_and_forty_ms_packets_are_reframed_and_the_hello_echoes_the_devices_parameters() -> None:
    offsets = {}
    for frame_ms in (60, 20, 40):
        turns = Turns()

        async def scenario(frame_ms: int = frame_ms, turns: Turns = turns) -> dict[str, Any]:
            async with device(turns) as dev:
                answer = await dev.hello(frame_ms=frame_ms)
                await dev.send({"type": "listen", "state": "start", "mode": "auto"})
                await dev.speak(CLIP, frame_ms=frame_ms)
                await dev.until(lambda: bool(dev.messages("tts", "stop")))
                await turns.settled(1)
                return answer

        answer = real(scenario)
        assert answer["audio_params"]["frame_duration"] == frame_ms
        ((_, timeline),) = turns.done
        assert timeline.ok, timeline.error_message
        offsets[frame_ms] = (timeline.vad.speech_start_offset_ms, timeline.vad.speech_end_offset_ms)
    # the VAD hears the same 60 ms frames whatever the packet size
    assert offsets[20] == offsets[40] == offsets[60]
    assert offsets[60][0] == 3 * 60  # the tone starts with the clip's fourth frame


def test_a_frame_size_the_firmware_never_sends_is_refused_at_hello() -> None:
    async def scenario() -> tuple[int | None, str]:
        async with device(Turns()) as dev:
            params = {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 100}
            await dev.ws.send(dump({"type": "hello", "transport": "websocket", "audio_params": params}))
            await dev.until(lambda: dev.reader.done())
            return dev.ws.close_code, dev.ws.close_reason or ""

    code, reason = real(scenario)
    assert code == 1002 and "frame_duration = 100" in reason


def test_abort_is_answered_with_tts_stop_at_once_and_the_turn_is_recorded_aborted() -> None:
    turns = Turns()

    async def scenario() -> tuple[Device, float]:
        async with device(turns) as dev:
            await dev.hello()
            await dev.send({"type": "listen", "state": "start", "mode": "auto"})
            await dev.speak(CLIP)
            await dev.until(lambda: any(isinstance(m, bytes) for _, m in dev.received))
            sent = time.monotonic()
            await dev.send({"type": "abort", "reason": "wake_word_detected"})
            await dev.until(lambda: bool(dev.messages("tts", "stop")))
            await turns.settled(1)
            stop_at = next(t for t, m in dev.received if isinstance(m, dict) and m.get("state") == "stop")
            return dev, stop_at - sent

    dev, after_s = real(scenario)
    assert after_s < 0.25  # the handler answers; nothing waits for the turn's teardown
    assert len(dev.messages("tts", "stop")) == 1
    ((_, timeline),) = turns.done
    assert timeline.error_type == "aborted" and "wake_word_detected" in timeline.error_message


def test_speaking_over_an_answer_stops_it_only_once_the_new_utterance_is_recognised() -> None:
    turns = Turns()

    async def scenario() -> Device:
        async with device(turns) as dev:
            await dev.hello()
            await dev.send({"type": "listen", "state": "start", "mode": "realtime"})
            await dev.send({"type": "lab", "state": "question", "question_id": "first", "round": 1})
            await dev.speak(CLIP)
            await dev.until(lambda: any(isinstance(m, bytes) for _, m in dev.received))
            await dev.send({"type": "lab", "state": "question", "question_id": "second", "round": 1})
            await dev.speak(CLIP)
            await dev.stream_until(lambda: len(dev.messages("tts", "stop")) >= 2)
            await turns.settled(2)
            return dev

    dev = real(scenario)
    first, second = turns.done[0], turns.done[1]
    assert first[0].question_id == "first" and first[1].error_type == "interrupted"
    assert second[0].question_id == "second" and second[1].ok
    kinds = [
        (m["type"], m.get("state")) for _, m in dev.received if isinstance(m, dict) and m["type"] in ("stt", "tts")
    ]
    second_stt = [i for i, k in enumerate(kinds) if k == ("stt", None)][1]
    assert kinds[second_stt - 1] == ("tts", "stop")  # the old answer is stopped right before the new one begins


def test_manual_mode_is_ended_by_listen_stop_not_by_the_vad() -> None:
    turns = Turns()

    async def scenario() -> tuple[float, float]:
        async with device(turns) as dev:
            await dev.hello()
            await dev.send({"type": "listen", "state": "start", "mode": "manual"})
            await dev.speak(CLIP + [SILENCE] * 20)  # 1.9 s of silence after the speech: the VAD would have ended it
            await asyncio.sleep(0.5)
            assert not dev.messages("stt")
            stopped = time.monotonic()
            await dev.send({"type": "listen", "state": "stop"})
            await dev.until(lambda: bool(dev.messages("tts", "stop")))
            await turns.settled(1)
            stt_at = next(t for t, m in dev.received if isinstance(m, dict) and m["type"] == "stt")
            return stopped, stt_at

    stopped, stt_at = real(scenario)
    assert stt_at > stopped
    ((request, timeline),) = turns.done
    assert request.mode == "manual" and timeline.ok and timeline.stages["vad"].impl == "manual"
    assert timeline.vad.speech_start_offset_ms == 0 and timeline.vad.speech_end_offset_ms == (len(CLIP) + 20) * 60


def test_listen_detect_is_a_typed_question_and_a_wake_word_gets_the_cached_reply() -> None:
    """The real server answers a wake word from its cache: tts start, the reply's sentence and audio, tts stop;
    no stt, no LLM, no turn (helloHandle.py checkWakeupWords). Its punctuation does not hide the word."""
    turns = Turns()

    async def scenario() -> Device:
        async with device(turns) as dev:
            await dev.hello()
            await dev.send({"type": "listen", "state": "detect", "text": "what time is it"})
            await dev.until(lambda: len(dev.messages("tts", "stop")) == 1)
            await dev.send({"type": "listen", "state": "detect", "text": "你好，小智！"})
            await dev.until(lambda: len(dev.messages("tts", "stop")) == 2)
            await turns.settled(1)
            return dev

    dev = real(scenario)
    assert [m["text"] for m in dev.messages("stt")] == ["what time is it"]
    assert [(r.started_by, tl.ok) for r, tl in turns.done] == [("text", True)]
    assert turns.done[0][1].stages["asr"].impl == "typed"
    after_wake = dev.received[[m for _, m in dev.received].index(dev.messages("tts", "stop")[0]) + 1 :]
    kinds = [m["state"] if isinstance(m, dict) else "audio" for _, m in after_wake]
    assert kinds == ["start", "sentence_start", *["audio"] * 5, "stop"]
    assert dev.messages("tts", "sentence_start")[-1]["text"] == "我在这里哦！"


@pytest.mark.parametrize(
    ("session", "said"),
    [
        ({"wake_reply_cache": False}, ["stt", "tts:start", "llm", "tts:sentence_start"]),  # an LLM turn on the greeting
        ({"greeting": False}, ["stt", "tts:start", "tts:stop"]),  # enable_greeting false: acknowledged
    ],
)
def test_a_wake_word_without_the_reply_cache_or_the_greeting_is_answered_as_the_real_server(
    session: dict[str, Any], said: list[str]
) -> None:
    turns = Turns()

    async def scenario() -> Device:
        async with device(turns, **session) as dev:
            await dev.hello()
            await dev.send({"type": "listen", "state": "detect", "text": "小冰小冰"})  # one of the real eleven
            await dev.until(lambda: len(dev.messages("tts", "stop")) == 1)
            return dev

    dev = real(scenario)
    heard = [f"{m['type']}:{m['state']}" if "state" in m else m["type"] for m in dev.messages()]
    assert heard[1 : 1 + len(said)] == said  # after our hello
    stt = dev.messages("stt")[0]["text"]
    assert stt == ("嘿，你好呀" if "wake_reply_cache" in session else "小冰小冰")


def test_bad_packets_and_text_are_dropped_and_counted_and_the_turn_goes_on() -> None:
    turns = Turns()

    async def scenario() -> None:
        async with device(turns) as dev:
            await dev.hello()
            await dev.send({"type": "listen", "state": "start", "mode": "auto"})
            await dev.ws.send(b"\xff\xfe\x00 not opus")
            await dev.ws.send("{this is not json")
            await dev.speak(CLIP)
            await dev.until(lambda: bool(dev.messages("tts", "stop")))
            await turns.settled(1)

    real(scenario)
    ((_, timeline),) = turns.done
    assert timeline.ok, timeline.error_message
    assert timeline.dropped == {"undecodable packet": 1, "malformed JSON": 1}


def test_a_repeated_hello_is_answered_alike_and_stops_nothing() -> None:
    """The real server answers every hello with the same session (helloHandle.py): a turn under way goes on."""
    turns = Turns()

    async def scenario() -> tuple[str, str]:
        async with device(turns) as dev:
            first = (await dev.hello())["session_id"]
            await dev.send({"type": "listen", "state": "start", "mode": "auto"})
            await dev.speak(CLIP[:12])
            second = (await dev.hello())["session_id"]
            await dev.speak(CLIP[12:])
            await dev.until(lambda: bool(dev.messages("tts", "stop")))
            await turns.settled(1)
            return first, second

    first, second = real(scenario)
    assert first == second
    ((request, timeline),) = turns.done
    assert request.session_id == first and timeline.ok, timeline.error_message


def test_after_an_empty_turn_in_auto_mode_the_next_utterance_is_heard_without_a_listen_start() -> None:
    turns = Turns(empty_first=True)

    async def scenario() -> None:
        async with device(turns) as dev:
            await dev.hello()
            await dev.send({"type": "listen", "state": "start", "mode": "auto"})
            await dev.speak(CLIP)  # a cough: recognised as nothing
            await dev.stream_until(lambda: len(turns.done) == 1)
            await dev.speak(CLIP)  # the firmware still streams: the user simply says it again
            await dev.stream_until(lambda: len(turns.done) == 2)

    real(scenario)
    assert [tl.error_type for _, tl in turns.done] == ["empty_transcript", ""]
    assert turns.done[1][0].started_by == "speech"
