"""The speech services' LLM relay over real HTTP on loopback: chat requests passed on to an upstream
byte for byte (SSE streamed through as it arrives), the upstream's key in place of the caller's, and
every request one ``llm.call`` span in the trace file, failed when the caller, the upstream or the
link to it failed; the next request is served as if nothing happened.

Two upstreams: the emulated cloud (a real OpenAI-compatible streaming server, with its faults) and a
fixed one here, whose answer is given bytes and which records what reached it, so bytes and times
can be checked exactly (the times on a clock that steps 1 ms at every reading).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from pipeline.analysis.traces import ReadProblems, ReadSpan, read_trace_file
from pipeline.clock import Clock, RealClock
from pipeline.endpoints.cloud.chat_server import EmulatedCloud
from pipeline.endpoints.cloud.compute import ComputeProfile
from pipeline.endpoints.speech import SpeechServices, SpeechStages
from pipeline.endpoints.speech.relay import EV_CHUNK, LlmRelay
from pipeline.endpoints.speech.speech_stages import Role
from pipeline.settings.config import AsrConfig, TtsConfig
from pipeline.tracing import names
from pipeline.tracing.export import Tracing
from stages.catalog import registry
from tests.scenario import StepClock

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
UPSTREAM_KEY = "sk-upstream-7f3a"
CALLER_KEY = "sk-caller-91c2"
SERVICES_KEY = "sk-services-5d0e"
QUESTION = "What time is it?"
CHAT = {
    "model": "qwen-test",
    "stream": True,
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}],
}
QUICK = ComputeProfile("quick", ttft_ms=5, per_token_ms=2)
ERROR_KEYS = {"message", "type", "param", "code"}


def scripted_stages() -> SpeechStages:
    """Oracle ASR and stub TTS: the relay's tests never call them, the services need some."""

    def role(name: str, impl: str, section: object) -> Role:
        found = registry().get(name, impl)
        return Role(found, found.settings_from(section), None, "")

    return SpeechStages(role("asr", "oracle", AsrConfig(impl="oracle")), role("tts", "stub", TtsConfig(impl="stub")))


@contextlib.asynccontextmanager
async def relaying(
    upstream: str, out: Path, upstream_key: str = UPSTREAM_KEY, clock: Clock | None = None, **options: Any
) -> AsyncIterator[tuple[SpeechServices, aiohttp.ClientSession]]:
    """The speech services relaying to ``upstream`` (a base URL), tracing to ``out``, and a client."""
    clock = clock or RealClock()
    tracing = Tracing(out / "traces" / "speech.jsonl", "lab-speech-services")
    relay = LlmRelay(upstream, upstream_key, tracing.emit_request, clock)
    services = SpeechServices(scripted_stages(), tracing, clock, relay=relay, **options)
    try:
        # a bound on every request: a relay that leaves its caller waiting fails the test, not the suite
        timeout = aiohttp.ClientTimeout(total=15)
        async with services, aiohttp.ClientSession(timeout=timeout) as session:
            yield services, session
    finally:
        tracing.shutdown()


def spans(out: Path) -> list[ReadSpan]:
    problems = ReadProblems()
    found = list(read_trace_file(out / "traces" / "speech.jsonl", problems))
    assert not problems.messages
    return found


async def post(session: aiohttp.ClientSession, base_url: str, body: Any = CHAT, **kw: Any) -> tuple[int, bytes, str]:
    async with session.post(f"{base_url}/chat/completions", json=body, **kw) as resp:
        return resp.status, await resp.read(), resp.content_type


def data_lines(stream: bytes) -> list[dict[str, Any]]:
    """The JSON chunks of an SSE body, ``[DONE]`` left out."""
    found = []
    for line in stream.splitlines():
        if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
            found.append(json.loads(line[5:]))
    return found


def content(stream: bytes) -> list[str]:
    """The content deltas of an SSE body, in order: what a client assembles the answer from."""
    return [
        chunk["choices"][0]["delta"]["content"]
        for chunk in data_lines(stream)
        if chunk["choices"] and chunk["choices"][0]["delta"].get("content")
    ]


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def fixed_wall_clock() -> float:
    return 1_700_000_000.0


def event_names(span: ReadSpan) -> list[str]:
    return [e.name for e in span.events]


def check_ordered(span: ReadSpan) -> None:
    times = [span.start_ns, *(e.time_ns for e in span.events), span.end_ns]
    assert times == sorted(times), times


# --- streaming, through the emulated cloud --------------------------------------------------------


def test_a_stream_reads_as_it_does_from_the_upstream_and_is_one_timed_span(tmp_path: Path) -> None:
    async def run() -> tuple[tuple[int, bytes, str], tuple[int, bytes, str]]:
        async with (
            EmulatedCloud(QUICK, wall_clock=fixed_wall_clock) as cloud,
            relaying(cloud.base_url, tmp_path) as (services, session),
        ):
            direct = await post(session, cloud.base_url, headers={"Authorization": f"Bearer {UPSTREAM_KEY}"})
            relayed = await post(session, services.base_url)
            return direct, relayed

    (status, direct, _), (relayed_status, relayed, content_type) = asyncio.run(run())
    assert status == relayed_status == 200 and content_type == "text/event-stream"
    pieces = content(relayed)
    assert len(pieces) > 3 and pieces == content(direct)  # the same answer, cut the same way
    assert relayed.endswith(b"data: [DONE]\n\n")
    chunks = data_lines(relayed)

    [span] = spans(tmp_path)
    assert span.name == names.LLM_CALL and span.status_code == 0 and span.parent_span_id == ""
    assert span.attributes == {
        names.HTTP_ROUTE: "/v1/chat/completions",
        names.GEN_AI_OPERATION: "chat",
        names.GEN_AI_MODEL: "qwen-test",
        "lab.llm.stream": True,
        "lab.llm.messages": 2,
        names.HTTP_STATUS: 200,
        "lab.relay.chunks": len(chunks),  # the role chunk, each piece, the finish and the timings chunks
        # the prompt as the upstream's final chunk counts it (llama.cpp's timings: prompt_n + cache_n)
        names.GEN_AI_INPUT_TOKENS: 8,
        names.PROMPT_CACHED_TOKENS: 0,
        names.OK: True,
    }
    # the role-only chunk first, then one event per piece of content
    assert event_names(span) == [names.EV_FIRST_CHUNK, names.EV_FIRST_TOKEN] + [EV_CHUNK] * (len(pieces) - 1)
    check_ordered(span)


def test_a_non_streaming_answer_passes_whole(tmp_path: Path) -> None:
    body = {**CHAT, "stream": False}

    async def run() -> tuple[tuple[int, bytes, str], tuple[int, bytes, str]]:
        async with (
            EmulatedCloud(QUICK, wall_clock=fixed_wall_clock) as cloud,
            relaying(cloud.base_url, tmp_path) as (services, session),
        ):
            direct = await post(session, cloud.base_url, body)
            return direct, await post(session, services.base_url, body)

    (_, direct, _), (status, relayed, content_type) = asyncio.run(run())
    assert status == 200 and content_type == "application/json"
    answer = json.loads(relayed)
    assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["content"]
    assert answer["choices"] == json.loads(direct)["choices"]
    [span] = spans(tmp_path)
    assert span.status_code == 0 and span.attributes["lab.llm.stream"] is False
    assert span.attributes[names.HTTP_STATUS] == 200 and "lab.relay.chunks" not in span.attributes
    # one answer, one moment: the whole of it arrived at once
    assert event_names(span) == [names.EV_FIRST_CHUNK, names.EV_FIRST_TOKEN]
    assert span.event_ns(names.EV_FIRST_CHUNK) == span.event_ns(names.EV_FIRST_TOKEN)
    check_ordered(span)


# --- bytes, keys and times, exactly: a fixed upstream --------------------------------------------

BEFORE_RELEASE = [
    b": keep-alive\n\n",
    b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n',
]
AFTER_RELEASE = [
    b'data: {"choices":[{"index":0,"delta":{"content":"lo, \xe4\xbd\xa0\xe5\xa5\xbd."}}]}\r\n\r\n',
    b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"set_light"}}]}}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
]
JSON_ANSWER = b'{"object": "chat.completion",  "choices": [{"message": {"content": "Hi."}}]}'


class FixedUpstream:
    """Answers every chat request with the same bytes and records the headers and body it got.

    A stream stops after "Hel" until ``release`` is set: a client that sets it on reading "Hel"
    through the relay shows the relay passed it on before the upstream had finished."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.release = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def __aenter__(self) -> FixedUpstream:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append((dict(request.headers), body))
        if not json.loads(body).get("stream"):
            return web.Response(body=JSON_ANSWER, content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in BEFORE_RELEASE:
            await resp.write(piece)
        await asyncio.wait_for(self.release.wait(), 5)
        for piece in AFTER_RELEASE:
            await resp.write(piece)
        await resp.write_eof()
        return resp


def test_bytes_pass_both_ways_unchanged_as_they_come_with_the_upstream_key_and_exact_times(tmp_path: Path) -> None:
    clock = StepClock()
    start = clock.t
    # the body as a client wrote it, spacing and escapes included: passed on as written
    sent = b'{"model": "m",  "stream": true, "messages": [{"role": "user", "content": "\\u4f60\\u597d"}]}'
    headers = {"Authorization": f"Bearer {CALLER_KEY}", "Content-Type": "application/json", "traceparent": TRACEPARENT}

    async def run() -> tuple[FixedUpstream, bytes, bool]:
        async with (
            FixedUpstream() as upstream,
            relaying(upstream.base_url, tmp_path, clock=clock) as (services, session),
        ):
            received, early = b"", False
            async with session.post(f"{services.base_url}/chat/completions", data=sent, headers=headers) as resp:
                assert resp.status == 200 and resp.content_type == "text/event-stream"
                async for piece in resp.content.iter_any():
                    received += piece
                    if b'"Hel"' in received and not upstream.release.is_set():
                        early = not received.endswith(b"[DONE]\n\n")
                        upstream.release.set()
            return upstream, received, early

    upstream, received, early = asyncio.run(run())
    assert early  # "Hel" reached the client while the upstream still held the rest
    assert received == b"".join(BEFORE_RELEASE + AFTER_RELEASE)
    [(got_headers, got_body)] = upstream.requests
    assert got_body == sent
    assert got_headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert got_headers["Content-Type"] == "application/json"
    assert not any(CALLER_KEY in value for value in got_headers.values())

    [span] = spans(tmp_path)
    # one reading as the request arrived, one per line as it passed (blank and comment lines too),
    # one as the last byte left: first_chunk at the role chunk (line 3), first_token at "Hel" (line 5),
    # a chunk at the next content (line 7) and the tool call (line 9); the finish chunk counts, unstamped
    assert (span.start_ns - start, span.end_ns - start) == (1_000_000, 16_000_000)
    assert [(e.name, e.time_ns - start) for e in span.events] == [
        (names.EV_FIRST_CHUNK, 4_000_000),
        (names.EV_FIRST_TOKEN, 6_000_000),
        (EV_CHUNK, 8_000_000),
        (EV_CHUNK, 10_000_000),
    ]
    assert span.attributes["lab.relay.chunks"] == 5 and span.attributes["lab.llm.messages"] == 1
    _, trace_id, parent_id, _ = TRACEPARENT.split("-")
    assert (span.trace_id, span.parent_span_id) == (trace_id, parent_id)


@pytest.mark.parametrize("upstream_key", ["", UPSTREAM_KEY])
def test_the_callers_key_never_reaches_the_upstream(tmp_path: Path, upstream_key: str) -> None:
    async def run() -> tuple[FixedUpstream, tuple[int, bytes, str]]:
        async with (
            FixedUpstream() as upstream,
            relaying(upstream.base_url, tmp_path, upstream_key=upstream_key) as (services, session),
        ):
            auth = {"Authorization": f"Bearer {CALLER_KEY}"}
            return upstream, await post(session, services.base_url, {**CHAT, "stream": False}, headers=auth)

    upstream, (status, body, _) = asyncio.run(run())
    assert status == 200 and body == JSON_ANSWER
    [(headers, _)] = upstream.requests
    assert headers.get("Authorization") == (f"Bearer {upstream_key}" if upstream_key else None)
    assert CALLER_KEY not in (tmp_path / "traces" / "speech.jsonl").read_text()


def test_an_upstream_with_a_key_serves_a_caller_with_another(tmp_path: Path) -> None:
    async def run() -> list[tuple[int, bytes, str]]:
        async with EmulatedCloud(QUICK, api_key=UPSTREAM_KEY) as cloud:
            caller = {"Authorization": f"Bearer {CALLER_KEY}"}
            async with relaying(cloud.base_url, tmp_path) as (services, session):
                direct = await post(session, cloud.base_url, headers=caller)  # the upstream checks its key
                relayed = await post(session, services.base_url, headers=caller)
            async with relaying(cloud.base_url, tmp_path, upstream_key="sk-wrong") as (services, session):
                wrong = await post(session, services.base_url, headers=caller)
            return [direct, relayed, wrong]

    direct, relayed, wrong = asyncio.run(run())
    assert direct[0] == 401 and relayed[0] == 200 and content(relayed[1])
    assert wrong[0] == 401 and json.loads(wrong[1])["error"]["code"] == "invalid_api_key"  # the upstream's word
    ok, refused = spans(tmp_path)
    assert ok.status_code == 0
    assert refused.status_code == names.STATUS_ERROR and refused.attributes[names.ERROR_TYPE] == "http_401"
    assert refused.attributes[names.HTTP_STATUS] == 401


# --- failures: passed on, recorded, and forgotten by the next request ------------------------------


@pytest.mark.parametrize(
    ("fault", "status", "message"), [("500", 500, "emulated server failure"), ("429", 429, "emulated overload")]
)
def test_an_upstream_error_is_passed_on_with_a_failed_span(
    tmp_path: Path, fault: str, status: int, message: str
) -> None:
    async def run() -> tuple[tuple[int, bytes, str], tuple[int, bytes, str]]:
        async with (
            EmulatedCloud(QUICK, fault=fault, fault_count=1) as cloud,
            relaying(cloud.base_url, tmp_path) as (services, session),
        ):
            return await post(session, services.base_url), await post(session, services.base_url)

    (got, body, content_type), (next_status, next_body, _) = asyncio.run(run())
    assert (got, content_type) == (status, "application/json")
    assert json.loads(body)["error"]["message"] == message  # the upstream's own error, as it sent it
    assert next_status == 200 and content(next_body)
    failed, served = spans(tmp_path)
    assert failed.status_code == names.STATUS_ERROR and failed.attributes[names.OK] is False
    assert failed.attributes[names.ERROR_TYPE] == f"http_{status}"
    assert message in str(failed.attributes[names.ERROR_MESSAGE])
    assert failed.attributes[names.HTTP_STATUS] == status and failed.events == ()
    assert failed.attributes[names.GEN_AI_MODEL] == "qwen-test"  # what was asked is known however it ended
    assert served.status_code == 0 and served.attributes[names.OK] is True


def test_a_body_the_upstream_refuses_is_its_400(tmp_path: Path) -> None:
    async def run() -> tuple[int, bytes, str]:
        async with (
            EmulatedCloud(QUICK) as cloud,
            relaying(cloud.base_url, tmp_path) as (services, session),
        ):
            data, headers = b"{not json", {"Content-Type": "application/json"}
            async with session.post(f"{services.base_url}/chat/completions", data=data, headers=headers) as resp:
                return resp.status, await resp.read(), resp.content_type

    status, body, _ = asyncio.run(run())
    assert status == 400 and json.loads(body)["error"]["type"] == "invalid_request_error"
    [span] = spans(tmp_path)
    assert span.attributes[names.ERROR_TYPE] == "http_400"
    assert names.GEN_AI_MODEL not in span.attributes  # nothing made up from a body that is not JSON


def test_a_garbage_stream_passes_through_as_sent(tmp_path: Path) -> None:
    async def run() -> tuple[bytes, bytes]:
        async with (
            EmulatedCloud(QUICK, fault="garbage") as cloud,
            relaying(cloud.base_url, tmp_path) as (services, session),
        ):
            return (await post(session, cloud.base_url))[1], (await post(session, services.base_url))[1]

    direct, relayed = asyncio.run(run())
    assert b"\xff\xfe garbage" in relayed and relayed == direct
    [span] = spans(tmp_path)
    # two data lines that are no chunk a client can read: counted, and no token claimed
    assert span.status_code == 0 and span.attributes["lab.relay.chunks"] == 2
    assert event_names(span) == [names.EV_FIRST_CHUNK]


def test_a_stream_the_upstream_cuts_is_cut_for_the_caller_and_recorded(tmp_path: Path) -> None:
    async def run() -> tuple[bytes, BaseException | None, tuple[int, bytes, str]]:
        async with (
            EmulatedCloud(QUICK, fault="drop", fault_after=2, fault_count=1) as cloud,
            relaying(cloud.base_url, tmp_path) as (services, session),
        ):
            received, error = b"", None
            try:
                async with session.post(f"{services.base_url}/chat/completions", json=CHAT) as resp:
                    assert resp.status == 200
                    async for piece in resp.content.iter_any():
                        received += piece
            except aiohttp.ClientError as exc:  # a timeout (the relay left its caller waiting) fails the test
                error = exc
            return received, error, await post(session, services.base_url)

    received, error, (next_status, next_body, _) = asyncio.run(run())
    assert isinstance(error, aiohttp.ClientPayloadError), error
    assert len(content(received)) == 2 and b"[DONE]" not in received  # what came before the cut came through
    assert next_status == 200 and len(content(next_body)) > 2
    cut, served = spans(tmp_path)
    assert cut.status_code == names.STATUS_ERROR and cut.attributes[names.ERROR_TYPE] == "upstream_unreachable"
    assert "ClientPayloadError" in str(cut.attributes[names.ERROR_MESSAGE])
    assert event_names(cut) == [names.EV_FIRST_CHUNK, names.EV_FIRST_TOKEN, EV_CHUNK]
    check_ordered(cut)
    assert served.status_code == 0


def test_an_unreachable_upstream_is_a_502_and_the_relay_recovers_when_it_is_back(tmp_path: Path) -> None:
    port = closed_port()

    async def run() -> tuple[tuple[int, bytes, str], tuple[int, bytes, str]]:
        async with relaying(f"http://127.0.0.1:{port}/v1/", tmp_path) as (services, session):
            down = await post(session, services.base_url, headers={"traceparent": TRACEPARENT})
            async with EmulatedCloud(QUICK, port=port):
                return down, await post(session, services.base_url)

    (status, body, content_type), (next_status, next_body, _) = asyncio.run(run())
    assert (status, content_type) == (502, "application/json")
    error = json.loads(body)["error"]
    assert set(error) == ERROR_KEYS and error["type"] == "upstream_error"
    assert f"127.0.0.1:{port}/v1 failed" in error["message"]
    assert next_status == 200 and content(next_body)
    down, back = spans(tmp_path)
    assert down.name == names.LLM_CALL and down.status_code == names.STATUS_ERROR
    assert down.attributes[names.ERROR_TYPE] == "upstream_unreachable" and down.attributes[names.OK] is False
    assert down.attributes[names.GEN_AI_MODEL] == "qwen-test" and down.events == ()
    _, trace_id, parent_id, _ = TRACEPARENT.split("-")
    assert (down.trace_id, down.parent_span_id) == (trace_id, parent_id)  # a failure joins the caller's trace too
    assert back.status_code == 0 and back.parent_span_id == "" and back.trace_id != trace_id


def test_a_caller_without_the_services_key_is_refused_before_the_upstream(tmp_path: Path) -> None:
    async def run() -> tuple[list[tuple[int, bytes, str]], int]:
        async with (
            EmulatedCloud(QUICK, api_key=UPSTREAM_KEY) as cloud,
            relaying(cloud.base_url, tmp_path, api_key=SERVICES_KEY) as (services, session),
        ):
            got = [
                await post(session, services.base_url, headers={"traceparent": TRACEPARENT}),
                await post(session, services.base_url, headers={"Authorization": f"Bearer {CALLER_KEY}"}),
                await post(session, services.base_url, headers={"Authorization": f"Bearer {SERVICES_KEY}"}),
            ]
            return got, cloud.requests

    (none, wrong, right), upstream_requests = asyncio.run(run())
    for status, body, _ in (none, wrong):
        assert status == 401
        error = json.loads(body)["error"]
        assert set(error) == ERROR_KEYS and error["code"] == "invalid_api_key"
    assert right[0] == 200 and content(right[1])  # the services' key in, the upstream's key on
    assert upstream_requests == 1  # a refused caller costs the upstream nothing
    refused, refused_again, served = spans(tmp_path)
    for span in (refused, refused_again):
        assert span.name == names.LLM_CALL and span.status_code == names.STATUS_ERROR
        assert span.attributes[names.ERROR_TYPE] == "invalid_api_key"
        assert span.attributes[names.HTTP_ROUTE] == "/v1/chat/completions" and span.end_ns >= span.start_ns
    _, trace_id, parent_id, _ = TRACEPARENT.split("-")
    assert (refused.trace_id, refused.parent_span_id) == (trace_id, parent_id)
    assert served.status_code == 0 and served.attributes[names.HTTP_STATUS] == 200
    written = (tmp_path / "traces" / "speech.jsonl").read_text()
    assert SERVICES_KEY not in written and UPSTREAM_KEY not in written and CALLER_KEY not in written


def test_a_caller_that_closes_at_done_leaves_the_call_whole_and_says_so(tmp_path: Path) -> None:
    # xiaozhi-esp32-server's OpenAI client closes its connection once it has read ``[DONE]``
    async def run() -> None:
        async with (
            EmulatedCloud(QUICK, wall_clock=fixed_wall_clock) as cloud,
            relaying(cloud.base_url, tmp_path) as (
                services,
                _,
            ),
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", services.port)
            body = json.dumps({"model": "qwen-test", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
            head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n{body}".encode())
            await writer.drain()
            seen = b""
            while b"[DONE]" not in seen:
                seen += await asyncio.wait_for(reader.read(4096), 10)
            writer.transport.abort()  # gone before the stream's end
            await asyncio.sleep(0.3)

    asyncio.run(run())
    [span] = spans(tmp_path)
    assert span.status_code == 0 and span.attributes[names.OK] is True
    assert span.event_ns(names.EV_FIRST_TOKEN) is not None
