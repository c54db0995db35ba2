"""A request body trickled a byte at a time is refused with 408 once it has taken ``body_s`` (virtual clock,
real loopback sockets), on every HTTP door that reads one: the speech services' upload and their LLM relay, and
the emulated cloud. Attack (issue 42, "Also"): a client that sends its body slowly held its handler and its
connection for as long as it liked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pipeline.clock import VirtualClock, run_on_clock
from pipeline.endpoints.cloud.chat_server import EmulatedCloud
from pipeline.endpoints.doors import HttpLimits
from pipeline.endpoints.serving import HttpApp
from pipeline.endpoints.speech import SpeechServices
from pipeline.endpoints.speech.relay import LlmRelay
from pipeline.tracing.export import Tracing
from tests.endpoints.speech.test_relay import QUICK, scripted_stages

LIMITS = HttpLimits(idle_s=15.0, body_s=30.0)
HEADS = {
    "upload": b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 1000\r\n\r\n",
    "chat": b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n",
}


def server(kind: str, tmp_path: Path, clock: VirtualClock) -> tuple[HttpApp, str, Tracing | None]:
    if kind == "cloud":
        return EmulatedCloud(QUICK), "chat", None
    tracing = Tracing(tmp_path / "traces" / "speech.jsonl", "lab-speech-services")
    relay = LlmRelay("http://127.0.0.1:9/v1", "", tracing.emit_request, clock) if kind == "relay" else None
    return SpeechServices(scripted_stages(), tracing, clock, relay=relay), "chat" if relay else "upload", tracing


@pytest.mark.parametrize("kind", ["upload", "relay", "cloud"])
def test_a_trickled_body_is_refused_at_body_s(kind: str, tmp_path: Path) -> None:
    clock = VirtualClock()
    app, request, tracing = server(kind, tmp_path, clock)
    app.limits = LIMITS

    async def scenario() -> tuple[bool, bytes, float]:
        async with app:
            reader, writer = await asyncio.open_connection("127.0.0.1", app.port)
            sent_ns = clock.now_ns()
            writer.write(HEADS[request] + b"{")
            answer = asyncio.ensure_future(reader.readline())
            for _ in range(29):  # a byte every second: never idle, never done
                await asyncio.sleep(1.0)
                writer.write(b" ")
            await asyncio.sleep(0.999)
            early = answer.done()  # 29.999 s after the head
            status = await asyncio.wait_for(answer, 1.0)
            writer.close()
            return early, status.strip(), (clock.now_ns() - sent_ns) / 1e9

    try:
        early, status, took_s = run_on_clock(scenario(), clock)
    finally:
        if tracing is not None:
            tracing.shutdown()
    assert not early and status == b"HTTP/1.1 408 Request Timeout"
    assert 30.0 <= took_s < 30.01
