"""The device emulator behaves as the xiaozhi firmware does, against a scripted server on loopback.

Each test's server plays a transcript of messages as a real server would and records what the
device sent and when: the hello, MCP answers, listen / lab / abort messages and the audio frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
import numpy as np
import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from pipeline.clock import RealClock
from pipeline.events import AudioFrame
from pipeline.run.device_side import Ask
from pipeline.tracing.timeline import TurnTimeline
from pipeline.transport.device.device import DeviceSettings, EmulatedDevice
from pipeline.transport.device.microphone import NOISE_FLOOR_DBFS, NoiseFloor
from pipeline.transport.device.tools import EmulatedTools
from pipeline.transport.wire import mcp as wire_mcp
from pipeline.transport.wire.opus import OpusDecoder, OpusEncoder
from tests.scenario import TONE, utterance
from tests.transport.server.test_websocket import real
from tests.wire_helpers import dump, hello, parse

CLOCK = RealClock()
CLIP = utterance(lead_frames=1, speech_frames=3, tail_frames=1)  # 300 ms: silence, tone, silence
SPEECH_END_MS = 4 * 60
_encoder = OpusEncoder("lab")
PACKETS = [_encoder.encode(TONE) for _ in range(60)]


def ask(question_id: str, round_no: int = 1, frames: list[AudioFrame] = CLIP) -> Ask:
    return Ask(frames, SPEECH_END_MS, question_id, round_no, "")


class Conn:
    """One device connection on the scripted server: what it read, stamped, and how it answers."""

    def __init__(self, ws: ServerConnection, index: int) -> None:
        self.ws, self.index = ws, index
        self.session_id = f"s{index}"
        self.log: list[tuple[int, dict[str, Any] | bytes]] = []
        self.sent: list[tuple[int, str]] = []  # (when, "type/state") of what the server sent
        self.hello: dict[str, Any] = {}
        self.taken: set[int] = set()  # log entries next_json has handed out

    async def read(self) -> dict[str, Any] | bytes:
        message = await self.ws.recv()
        item: dict[str, Any] | bytes = parse(message) if isinstance(message, str) else message
        self.log.append((CLOCK.now_ns(), item))
        return item

    async def next_json(self, kind: str) -> dict[str, Any]:
        """The first message of ``kind`` not taken yet, whether it came while waiting for another or not."""
        index = 0
        while True:
            while index < len(self.log):
                item = self.log[index][1]
                if isinstance(item, dict) and item["type"] == kind and index not in self.taken:
                    self.taken.add(index)
                    return item
                index += 1
            await self.read()

    async def audio(self, count: int) -> None:
        got = 0
        while got < count:
            got += isinstance(await self.read(), bytes)

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append((CLOCK.now_ns(), f"{message['type']}/{message.get('state', '')}"))
        await self.ws.send(dump({**message, "session_id": self.session_id}))

    async def frames(self, count: int, gap_s: float = 0.0) -> None:
        for packet in PACKETS[:count]:
            self.sent.append((CLOCK.now_ns(), "audio"))
            await self.ws.send(packet)
            if gap_s:
                await asyncio.sleep(gap_s)

    async def request(self, payload: dict[str, Any]) -> dict[str, Any]:
        await self.send({"type": "mcp", "payload": payload})
        answer = await self.next_json("mcp")
        assert answer["session_id"] == self.session_id
        return dict(answer["payload"])

    async def answer(self, frames: int = 5, gap_s: float = 0.0) -> None:
        await self.send({"type": "stt", "text": "question"})
        await self.send({"type": "llm", "text": "🙂", "emotion": "happy"})
        await self.send({"type": "tts", "state": "start"})
        await self.send({"type": "tts", "state": "sentence_start", "text": "An answer."})
        await self.frames(frames, gap_s)
        await self.send({"type": "tts", "state": "stop"})

    async def until_closed(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            while True:
                await self.read()

    def of(self, kind: str, state: str | None = None) -> list[tuple[int, dict[str, Any]]]:
        return [
            (at, m)
            for at, m in self.log
            if isinstance(m, dict) and m["type"] == kind and (state is None or m.get("state") == state)
        ]

    def when_sent(self, what: str) -> list[int]:
        return [at for at, sent in self.sent if sent == what]


Script = Callable[[Conn], Awaitable[None]]


@contextlib.asynccontextmanager
async def scripted(script: Script) -> AsyncIterator[tuple[str, list[Conn]]]:
    """A server on 127.0.0.1 that answers hello, then plays ``script`` on each connection."""
    conns: list[Conn] = []

    async def handler(ws: ServerConnection) -> None:
        conn = Conn(ws, len(conns))
        conns.append(conn)
        conn.hello = await conn.next_json("hello")
        await ws.send(dump(hello(session_id=conn.session_id)))
        with contextlib.suppress(ConnectionClosed):
            await script(conn)

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        yield f"ws://127.0.0.1:{port}/xiaozhi/v1/", conns


def settings(url: str, **changes: Any) -> DeviceSettings:
    return DeviceSettings(url=url, **{"mcp_wait_s": 0.05, "turn_timeout_s": 10.0, **changes})


async def answer_each(conn: Conn, turns: int, frames: int = 5) -> None:
    """Auto mode: each listen start, the clip's audio, an answer."""
    for _ in range(turns):
        await conn.next_json("listen")
        await conn.audio(len(CLIP))
        await conn.answer(frames)
    await conn.until_closed()


def rms_dbfs(pcm: bytes) -> float:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    return float(20 * np.log10(max(np.sqrt(np.mean(samples**2)), 1e-9) / 32767))


def test_the_hello_names_the_protocol_version_and_mcp_and_the_client_id_is_stable() -> None:
    async def scenario() -> list[Conn]:
        async with scripted(lambda conn: conn.until_closed()) as (url, conns):
            for _ in range(2):
                async with EmulatedDevice(settings(url, protocol_version=2, device_id="02:00:00:00:00:07"), CLOCK):
                    pass
        return conns

    conns = real(scenario)
    assert [c.hello["version"] for c in conns] == [2, 2]
    assert all(c.hello["features"] == {"mcp": True} and c.hello["transport"] == "websocket" for c in conns)
    ids = {c.ws.request.headers["Client-Id"] for c in conns}  # type: ignore[union-attr]
    assert ids == {str(uuid.uuid5(uuid.NAMESPACE_DNS, "02:00:00:00:00:07"))}


@pytest.mark.transport
def test_mcp_is_answered_as_the_firmware_does_before_and_during_a_turn() -> None:
    answers: dict[str, dict[str, Any]] = {}

    async def script(conn: Conn) -> None:
        vision = {"vision": {"url": "http://127.0.0.1/vision", "token": "t"}}
        answers["initialize"] = await conn.request(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": vision}}
        )
        await conn.send({"type": "mcp", "payload": {"jsonrpc": "2.0", "method": "notifications/initialized"}})
        await asyncio.sleep(0.3)  # the real server waits a second before it asks
        answers["list"] = await conn.request({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        calls = {
            "volume": ("self.audio_speaker.set_volume", {"volume": 30}),
            "too_loud": ("self.audio_speaker.set_volume", {"volume": 150}),
            "no_volume": ("self.audio_speaker.set_volume", {}),
            "light": ("self.light.set_light", {"room": "kitchen", "on": True}),
            "unknown": ("self.teleport", {}),
            "status": ("self.get_device_status", {}),
        }
        for number, (key, (name, arguments)) in enumerate(calls.items(), start=3):
            payload = {"name": name, "arguments": arguments}
            answers[key] = await conn.request(
                {"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": payload}
            )
        answers["paged"] = await conn.request(
            {"jsonrpc": "2.0", "id": 20, "method": "tools/list", "params": {"cursor": "self.light.set_light"}}
        )
        answers["other"] = await conn.request({"jsonrpc": "2.0", "id": 21, "method": "resources/list"})
        await conn.next_json("listen")
        await conn.audio(2)
        call = {"name": "self.get_device_status", "arguments": {}}
        answers["during"] = await conn.request({"jsonrpc": "2.0", "id": 22, "method": "tools/call", "params": call})
        await conn.audio(len(CLIP) - 2)
        await conn.answer()
        await conn.until_closed()

    async def scenario() -> tuple[TurnTimeline, list[Conn]]:
        async with scripted(script) as (url, conns), EmulatedDevice(settings(url, mcp_wait_s=3.0), CLOCK) as device:
            return await device.turn(ask("q1")), conns

    timeline, conns = real(scenario)
    assert timeline.ok, timeline.error_message
    assert answers["initialize"] == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "protocolVersion": "2024-11-05",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "voice-latency-lab-emulator", "version": "1.0.0"},
        },
    }
    tools = answers["list"]["result"]["tools"]
    assert answers["list"]["id"] == 2 and "nextCursor" not in answers["list"]["result"]
    assert [t["name"] for t in tools] == [
        "self.get_device_status",
        "self.audio_speaker.set_volume",
        "self.light.set_light",
    ]
    volume = tools[1]["inputSchema"]
    assert volume == {
        "type": "object",
        "properties": {"volume": {"type": "integer", "minimum": 0, "maximum": 100}},
        "required": ["volume"],
    }
    assert tools[0]["inputSchema"] == {"type": "object", "properties": {}}
    assert tools[2]["inputSchema"]["properties"] == {"room": {"type": "string"}, "on": {"type": "boolean"}}
    ok = {"content": [{"type": "text", "text": "true"}], "isError": False}
    assert answers["volume"] == {"jsonrpc": "2.0", "id": 3, "result": ok}
    assert answers["too_loud"] == {
        "jsonrpc": "2.0",
        "id": 4,
        "error": {"message": "Value exceeds maximum allowed: 100"},
    }
    assert answers["no_volume"]["error"] == {"message": "Missing valid argument: volume"}
    assert answers["light"]["result"] == ok
    assert answers["unknown"] == {"jsonrpc": "2.0", "id": 7, "error": {"message": "Unknown tool: self.teleport"}}
    status = json.loads(answers["status"]["result"]["content"][0]["text"])
    assert status["audio_speaker"] == {"volume": 30} and status["lights"] == {"kitchen": True}
    assert "battery" not in status
    assert [t["name"] for t in answers["paged"]["result"]["tools"]] == ["self.light.set_light"]
    assert answers["other"]["error"] == {"message": "Method not implemented: resources/list"}
    assert answers["during"]["id"] == 22 and "volume" in answers["during"]["result"]["content"][0]["text"]
    conn = conns[0]
    ids = [m["payload"]["id"] for _, m in conn.of("mcp")]
    assert ids == [1, 2, 3, 4, 5, 6, 7, 8, 20, 21, 22]  # in order; the notification has no answer
    # the first question waited for tools/list to be answered, not for the whole 3 s
    listed_at = conn.of("mcp")[1][0]
    first_listen = conn.of("listen", "start")[0][0]
    assert listed_at < first_listen
    assert conn.of("hello")[0][0] + 3e9 > first_listen


def test_the_mcp_server_pages_and_refuses_as_the_firmware() -> None:
    tools = EmulatedTools()

    def handle(payload: dict[str, Any]) -> Any:
        """The device's answer to a payload as it arrives (decoded by the wire), as JSON."""
        answer = tools.handle(wire_mcp.read(json.dumps(payload)))
        return None if answer is None else msgspec.to_builtins(answer)

    assert handle({"jsonrpc": "1.0", "id": 1, "method": "initialize"}) is None
    assert handle({"jsonrpc": "2.0", "id": "1", "method": "initialize"}) is None  # the id must be a number
    assert handle({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": []}) is None
    call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call"}
    assert handle(call) == {"jsonrpc": "2.0", "id": 5, "error": {"message": "Missing params"}}
    assert handle({**call, "params": {"name": 3}})["error"] == {"message": "Missing name"}
    bad = {**call, "params": {"name": "self.light.set_light", "arguments": []}}
    assert handle(bad)["error"] == {"message": "Invalid arguments"}
    wrong = {**call, "params": {"name": "self.light.set_light", "arguments": {"room": "hall", "on": "yes"}}}
    assert handle(wrong)["error"] == {"message": "Missing valid argument: on"}
    low = {**call, "params": {"name": "self.audio_speaker.set_volume", "arguments": {"volume": -1}}}
    assert handle(low)["error"] == {"message": "Value is below minimum allowed: 0"}
    lost = {"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": {"cursor": "no.such.tool"}}
    assert handle(lost)["error"] == {"message": "Failed to add tool  because of payload size limit"}


@pytest.mark.transport
def test_realtime_mode_says_listen_start_once_and_names_each_question_before_its_audio() -> None:
    async def script(conn: Conn) -> None:
        for _ in range(3):
            await conn.next_json("lab")
            await conn.audio(len(CLIP))
            await conn.answer()
        await conn.until_closed()

    async def scenario() -> tuple[list[TurnTimeline], list[Conn]]:
        async with (
            scripted(script) as (url, conns),
            EmulatedDevice(settings(url, listen_mode="realtime"), CLOCK) as device,
        ):
            timelines = [await device.turn(ask(q, 2)) for q in ("q1", "q2", "q3")]
            await asyncio.sleep(0.3)  # idle: the microphone goes on
            return timelines, conns

    timelines, conns = real(scenario)
    assert all(tl.ok for tl in timelines), [tl.error_message for tl in timelines]
    conn = conns[0]
    starts = conn.of("listen", "start")
    assert len(starts) == 1 and starts[0][1]["mode"] == "realtime" and "lab" not in starts[0][1]
    labs = conn.of("lab")
    assert [(m["state"], m["question_id"], m["round"], m["session_id"]) for _, m in labs] == [
        ("question", q, 2, "s0") for q in ("q1", "q2", "q3")
    ]
    assert not conn.of("listen", "stop")
    decoder = OpusDecoder()
    loudness = [
        (rms_dbfs(decoder.decode(m)) if isinstance(m, bytes) else None, m if isinstance(m, dict) else None)
        for _, m in conn.log[1:]
    ]
    for index, (_, message) in enumerate(loudness):
        if message is not None and message["type"] == "lab":
            before = [db for db, _ in loudness[:index] if db is not None]
            after = [db for db, _ in loudness[index + 1 : index + 1 + len(CLIP)] if db is not None]
            assert message["question_id"] == "q1" or before[-1] < -45  # the noise floor up to the question
            assert max(after) > -20  # the question's tone right after its lab message
    # the microphone streams between questions and through the answers
    frames = sum(isinstance(m, bytes) for _, m in conn.log)
    assert frames > 3 * len(CLIP) + 5
    for tl in timelines:
        assert tl.device is not None and tl.device.first_audio_received_ns is not None
        assert tl.device.last_uplink_ns is not None and tl.device.last_uplink_ns > tl.device.first_audio_received_ns


def test_the_noise_floor_is_quiet_not_silent_and_repeats_per_device() -> None:
    one, two, other = NoiseFloor("a"), NoiseFloor("a"), NoiseFloor("b")
    frames = [one.frame() for _ in range(20)]
    assert frames == [two.frame() for _ in range(20)] and frames[0] != other.frame()
    level = rms_dbfs(b"".join(frames))
    assert level == pytest.approx(NOISE_FLOOR_DBFS, abs=0.5)


@pytest.mark.transport
def test_audio_outside_tts_start_and_stop_is_dropped_counted_and_never_reaches_the_next_turn() -> None:
    async def script(conn: Conn) -> None:
        await conn.next_json("listen")
        await conn.audio(len(CLIP))
        await conn.frames(2)  # before tts start
        await conn.answer(4)
        await conn.frames(3)  # after tts stop
        await conn.next_json("listen")
        await conn.audio(len(CLIP))
        await asyncio.sleep(0.2)
        await conn.answer(4)
        await conn.until_closed()

    async def scenario() -> list[TurnTimeline]:
        async with scripted(script) as (url, _conns), EmulatedDevice(settings(url), CLOCK) as device:
            return [await device.turn(ask("q1")), await device.turn(ask("q2"))]

    first, second = real(scenario)
    assert first.ok and second.ok, (first.error_message, second.error_message)
    assert first.device is not None and second.device is not None
    assert (first.device.dropped_frames, first.device.downlink_frames) == (2, 4)
    assert (second.device.dropped_frames, second.device.downlink_frames) == (3, 4)
    assert first.playback.audio_ms == second.playback.audio_ms == 4 * 60
    # the stale frames set nothing: the second answer's first frame came after its stt
    assert second.device.stt_ns is not None and second.device.first_audio_received_ns is not None
    assert second.device.first_audio_received_ns > second.device.stt_ns
    assert second.vad.user_speech_end_ns is not None
    assert second.device.first_audio_received_ns - second.vad.user_speech_end_ns >= 0.2e9


@pytest.mark.transport
def test_with_settle_ms_the_next_question_waits_for_a_server_still_answering_the_last() -> None:
    async def script(conn: Conn) -> None:
        await conn.next_json("listen")
        await conn.audio(len(CLIP))
        await conn.answer(4)
        # the server heard a second utterance of the first question, and answers it after the turn ended
        await asyncio.sleep(0.1)
        await conn.answer(3, gap_s=0.05)
        await conn.next_json("listen")
        await conn.audio(len(CLIP))
        await conn.answer(4)
        await conn.until_closed()

    async def scenario() -> tuple[list[TurnTimeline], list[Conn]]:
        async with scripted(script) as (url, conns), EmulatedDevice(settings(url, settle_ms=300), CLOCK) as device:
            return [await device.turn(ask("q1")), await device.turn(ask("q2"))], conns

    (first, second), [conn] = real(scenario)
    assert first.ok and second.ok, (first.error_message, second.error_message)
    assert first.device is not None and second.device is not None
    # the second question was asked 300 ms after the server's last message, what it sent meanwhile no turn's
    last_stray = conn.when_sent("tts/stop")[1]
    second_listen = conn.of("listen", "start")[1][0]
    assert second_listen - last_stray >= 0.3e9
    assert len(second.device.stt_at) == 1 and second.device.stt_at[0] > second_listen
    assert second.device.settle_wait_ns > 0


@pytest.mark.transport
@pytest.mark.parametrize("jitter", [0, 2])
def test_jitter_frames_hold_only_the_start_of_an_answer(jitter: int) -> None:
    async def script(conn: Conn) -> None:
        await conn.next_json("listen")
        await conn.audio(len(CLIP))
        await conn.answer(3, gap_s=0.2)  # frames 200 ms apart: the player runs dry after each
        await conn.until_closed()

    async def scenario() -> TurnTimeline:
        async with scripted(script) as (url, _conns), EmulatedDevice(settings(url, jitter_frames=jitter), CLOCK) as d:
            return await d.turn(ask("q1"))

    timeline = real(scenario)
    assert timeline.ok, timeline.error_message
    device, playback = timeline.device, timeline.playback
    assert device is not None and device.first_audio_received_ns is not None and device.last_audio_received_ns
    assert playback.first_start_ns is not None and playback.last_end_ns is not None
    first_wait = (playback.first_start_ns - device.first_audio_received_ns) / 1e6
    if jitter == 0:
        assert first_wait < 50  # played as it came
    else:
        assert 170 < first_wait < 260  # held until the second frame came, 200 ms later
    # the last frame is played as it comes, not held for a partner or for tts stop (200 ms later)
    assert (playback.last_end_ns - device.last_audio_received_ns) / 1e6 == pytest.approx(60, abs=40)


def barge_in_script(conn: Conn) -> Awaitable[None]:
    async def script() -> None:
        realtime = (await conn.next_json("listen"))["mode"] == "realtime"
        if realtime:
            await conn.next_json("lab")
        await conn.audio(len(CLIP))
        await conn.send({"type": "stt", "text": "question"})
        await conn.send({"type": "tts", "state": "start"})
        await conn.send({"type": "tts", "state": "sentence_start", "text": "A long answer."})
        await conn.frames(8)  # a burst the device buffers, then one frame per 60 ms

        async def paced() -> None:
            while True:
                await conn.frames(1, gap_s=0.06)

        sending = asyncio.create_task(paced())
        await conn.next_json("abort")
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
        await conn.send({"type": "tts", "state": "stop"})  # xs abortHandle.py: at once
        await conn.next_json("listen")
        if realtime:
            await conn.next_json("lab")
        await conn.audio(len(CLIP))
        await conn.answer(3)
        await conn.until_closed()

    return script()


@pytest.mark.transport
@pytest.mark.parametrize(("way", "mode"), [("wake", "auto"), ("button", "auto"), ("wake", "realtime")])
def test_barge_in_follows_the_firmwares_wake_word_or_button_path(way: str, mode: str) -> None:
    async def scenario() -> tuple[TurnTimeline, TurnTimeline, Conn]:
        async with scripted(barge_in_script) as (url, conns):
            device_settings = settings(url, barge_in_after_ms=120, barge_in_with=way, listen_mode=mode)
            async with EmulatedDevice(device_settings, CLOCK) as device:
                first = await device.turn(ask("q1"), then=ask("q2"))
                second = await device.turn(ask("q2"))
        return first, second, conns[0]

    first, second, conn = real(scenario)
    assert first.ok and second.ok, (first.error_message, second.error_message)
    assert first.device is not None and first.device.abort_ns is not None and first.playback.last_end_ns is not None
    order = [
        (m["type"], m.get("state"), m.get("reason"))
        for _, m in conn.log
        if isinstance(m, dict) and m["type"] in ("listen", "abort")
    ]
    reason = "wake_word_detected" if way == "wake" else None
    assert order[:3] == [("listen", "start", None), ("abort", None, reason), ("listen", "start", None)]
    assert order[3:] in ([], [("abort", None, reason)])  # the second answer is cut short too, with no question after
    abort_at, abort = conn.of("abort")[0]
    assert ("reason" in abort) is (way == "wake")
    second_listen_at, second_listen = conn.of("listen", "start")[1]
    assert second_listen["mode"] == mode
    named = second_listen["lab"] if mode == "auto" else conn.of("lab")[1][1]  # realtime: the lab message
    assert named["question_id"] == "q2"
    played_ms = (first.playback.last_end_ns - first.device.abort_ns) / 1e6  # interrupt_played_ms
    listen_after_abort_ms = (second_listen_at - abort_at) / 1e6
    if (way, mode) == ("wake", "auto"):
        # the buffer (a burst of eight frames, two of them played) plays out; listen start once it has
        assert played_ms >= 250
        assert second_listen_at >= first.playback.last_end_ns and listen_after_abort_ms >= 200
    else:
        # the frame playing finishes, the rest is dropped; listen start right after the abort (in realtime
        # mode the wake word too: StartListeningAudio resets the decoder at once)
        assert played_ms <= 90
        assert listen_after_abort_ms < 50
    assert second.device is not None and second.device.first_uplink_ns is not None
    assert second.device.first_uplink_ns > first.device.abort_ns and second.device.transcript == "question"
    # the first turn has the connection's set-up behind it; the second a wake word's path, or the button's
    assert (first.device.temperature, second.device.temperature) == (
        "cold_connection",
        "cold_wake" if way == "wake" else "warm",
    )


@pytest.mark.transport
def test_a_connection_the_server_closed_while_the_device_was_idle_is_opened_again() -> None:
    async def script(conn: Conn) -> None:
        await conn.next_json("listen")
        await conn.audio(len(CLIP))
        await conn.answer(3)
        if conn.index == 0:
            await asyncio.sleep(0.2)
            await conn.ws.close(1000, "idle")
            return
        await conn.until_closed()

    async def scenario() -> tuple[list[TurnTimeline], list[Conn], int]:
        async with scripted(script) as (url, conns), EmulatedDevice(settings(url), CLOCK) as device:
            first = await device.turn(ask("q1"))
            await asyncio.sleep(0.5)
            second = await device.turn(ask("q2"))
            return [first, second], conns, device.reconnects

    (first, second), conns, reconnects = real(scenario)
    assert first.ok and second.ok, (first.error_message, second.error_message)
    assert len(conns) == 2 and all(c.hello["type"] == "hello" for c in conns) and reconnects == 1
    assert first.device is not None and second.device is not None
    assert (first.device.reconnects, second.device.reconnects) == (0, 1)
    # each the first turn on its connection
    assert first.device.temperature == second.device.temperature == "cold_connection"
    assert conns[1].of("listen", "start")[0][1]["session_id"] == "s1"


def test_a_server_that_says_nothing_of_a_question_fails_it_at_the_answer_timeout_not_the_turn_limit() -> None:
    """The real server sends nothing at all for an utterance it did not recognise (asr/base.py): the device
    gives up ``answer_timeout_s`` after its question's last frame (and its noise tail), aborts, and the next
    question goes on."""

    async def script(conn: Conn) -> None:
        await conn.next_json("listen")  # heard nothing it could write down: says nothing
        await conn.next_json("abort")
        await conn.send({"type": "tts", "state": "stop"})
        await answer_each(conn, 1)

    async def scenario() -> tuple[TurnTimeline, TurnTimeline, float]:
        changes = {"answer_timeout_s": 0.5, "tail_ms": 300}
        async with scripted(script) as (url, _), EmulatedDevice(settings(url, **changes), CLOCK) as device:
            start = asyncio.get_running_loop().time()
            silent = await device.turn(ask("q1"))
            took = asyncio.get_running_loop().time() - start
            return silent, await device.turn(ask("q2")), took

    silent, answered, took = real(scenario)
    assert silent.error_type == "empty_transcript" and "said nothing within 0.5 s" in silent.error_message
    assert took < 3.0  # clip 0.3 s + tail 0.3 s + 0.5 s (1.1 s in all), far from the 10 s turn limit
    assert answered.ok, answered.error_message


def test_settings_the_firmware_does_not_have_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="listen_mode 'push'"):
        DeviceSettings(url="ws://127.0.0.1:1/", listen_mode="push")
    with pytest.raises(ValueError, match="barge_in_with 'abort'"):
        DeviceSettings(url="ws://127.0.0.1:1/", barge_in_with="abort")
    with pytest.raises(ValueError, match="jitter_frames -1"):
        DeviceSettings(url="ws://127.0.0.1:1/", jitter_frames=-1)
