"""The OpenAI-compatible backend's real calls on loopback against the emulated cloud and its faults,
alone and inside full turns (M7: failures are rows)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from labtools.cloud_turns import TraceRows, cloud_turn
from pipeline.clock import Clock, RealClock, VirtualClock, run_on_clock
from pipeline.endpoints.cloud import ComputeProfile, EmulatedCloud, get_compute_profile, pick_answer
from pipeline.events import CallEnd, CallStart, TokenDelta, Transcript
from stages.llm import ChatRequest, Chunk, LlmSettings, LlmStage, Message
from stages.llm.openai import (
    CloudLlmError,
    LlmAuthError,
    LlmConnectionError,
    LlmHttpError,
    LlmMissingApiKey,
    LlmProtocolError,
    LlmTimeout,
    LlmUnreachable,
    OpenAIChatBackend,
    OpenAISettings,
    RateLimited,
)
from tests.harness import StageRun, stage_run

QUICK = ComputeProfile("quick", ttft_ms=5, per_token_ms=1, slots=4)
KEY = "sk-lab-0123456789abcdef0123"
ASK = ChatRequest((Message("system", "Be brief."), Message("user", "What time is it?")), max_tokens=64)


def settings(base_url: str, **kwargs: Any) -> OpenAISettings:
    return OpenAISettings(base_url=base_url, model="emulated", **kwargs)


# --- real calls on loopback ---------------------------------------------------------------------


async def collect(backend: OpenAIChatBackend, request: ChatRequest = ASK) -> list[Chunk]:
    return [c async for c in backend.stream(request)]


def call(cloud: EmulatedCloud | None, url: str = "", clock: Clock | None = None, **kwargs: Any) -> StageRun:
    """ASK answered by the LLM stage against a fresh emulator (or ``url``), through the single-stage harness on
    ``clock`` (default: the real one); the emulator and the client are closed after."""
    api_key = kwargs.pop("api_key", None)
    clock = clock or RealClock()
    llm = LlmSettings(max_tokens=ASK.max_tokens, system_prompt=ASK.messages[0].content)
    question = [Transcript(ASK.messages[1].content, "en")]

    async def main() -> StageRun:
        if cloud is None:
            async with OpenAIChatBackend(settings(url, **kwargs), api_key=api_key) as backend:
                return await stage_run(LlmStage(backend, llm, impl="openai", scripted=False), question, clock)
        async with cloud, OpenAIChatBackend(settings(cloud.base_url, **kwargs), api_key=api_key) as backend:
            return await stage_run(LlmStage(backend, llm, impl="openai", scripted=False), question, clock)

    return run_on_clock(main(), clock)


def closed_port_url() -> str:
    async def main() -> int:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port: int = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        return port

    return f"http://127.0.0.1:{asyncio.run(main())}/v1"


def test_a_real_stream_from_the_emulated_cloud_is_timed_exactly_on_the_virtual_clock() -> None:
    """The emulator paces its answer on the run's clock: 5 ms to the first token, then 1 ms a token. So the
    recorder stamps the stage's first token at exactly 5 ms and the call's end with its last token."""
    run = call(EmulatedCloud(QUICK), clock=VirtualClock())
    start, *chunks = run.events
    assert isinstance(start, CallStart) and chunks[0] == TokenDelta("")
    assert "".join(c.text for c in run.of(TokenDelta)) == pick_answer("What time is it?")
    done = chunks[-1]
    assert isinstance(done, CallEnd) and done.finish_reason == "stop" and done.output_tokens == len(chunks) - 2
    timings = dict(done.server_timings)
    assert set(timings) == {"queue_ms", "prompt_ms", "predicted_ms", "prompt_n", "predicted_n", "attempts"}
    assert (timings["prompt_ms"], timings["predicted_ms"], timings["attempts"]) == (5, done.output_tokens - 1, 1)
    [timed] = run.timeline.calls
    assert run.ms(timed.start_ns) == 0 and run.ms(timed.first_token_ns) == 5
    assert run.first_ms(CallEnd) == run.ms(timed.end_ns) == 5 + (done.output_tokens - 1)


def test_per_sentence_calls_walk_through_the_answer() -> None:
    async def main() -> tuple[list[str], list[bool]]:
        async with EmulatedCloud(QUICK) as cloud, OpenAIChatBackend(settings(cloud.base_url)) as backend:
            answer, sentences, complete = "", [], []
            for _ in range(6):
                request = ChatRequest((Message("user", "Tell me a story"),), 32, True, assistant_prefix=answer)
                out = await collect(backend, request)
                piece = "".join(c.text for c in out if isinstance(c, TokenDelta))
                answer += piece
                sentences.append(piece)
                assert isinstance(out[-1], CallEnd)
                complete.append(out[-1].answer_complete)
                if out[-1].answer_complete:
                    break
            return sentences, complete

    sentences, complete = asyncio.run(main())
    assert "".join(sentences) == pick_answer("Tell me a story")
    assert complete[-1] and not any(complete[:-1]) and len(sentences) >= 2


def test_connect_to_reaches_the_endpoint_without_resolving_its_name() -> None:
    async def main() -> tuple[list[Chunk], str]:
        async with EmulatedCloud(QUICK) as cloud:
            url = f"http://llm.example.invalid:{cloud.port}/v1"
            async with OpenAIChatBackend(settings(url), connect_to=("127.0.0.1", cloud.port)) as backend:
                return await collect(backend), backend.server_address

    out, address = asyncio.run(main())
    assert isinstance(out[-1], CallEnd) and address.startswith("llm.example.invalid:")


def test_connections_are_kept_alive_across_calls() -> None:
    created: list[int] = []

    async def on_create(session: aiohttp.ClientSession, ctx: Any, params: Any) -> None:
        created.append(1)

    hooks = aiohttp.TraceConfig()
    hooks.on_connection_create_end.append(on_create)

    async def main(keepalive_s: float) -> None:
        async with EmulatedCloud(QUICK) as cloud:
            backend = OpenAIChatBackend(settings(cloud.base_url, keepalive_s=keepalive_s), trace_configs=[hooks])
            async with backend:
                for _ in range(3):
                    await collect(backend)

    asyncio.run(main(60))
    assert len(created) == 1
    created.clear()
    asyncio.run(main(0))
    assert len(created) == 3


@pytest.mark.parametrize(
    ("fault", "error", "message"),
    [
        ("garbage", LlmProtocolError, "malformed JSON"),
        ("not-sse", LlmProtocolError, "expected an event stream"),
        ("429", RateLimited, "HTTP 429"),
        ("500", LlmHttpError, "HTTP 500"),
        ("drop", LlmConnectionError, "connection broken"),
    ],
)
def test_faults_become_named_errors(fault: str, error: type[CloudLlmError], message: str) -> None:
    with pytest.raises(error, match=message) as caught:
        call(EmulatedCloud(QUICK, fault=fault))
    assert caught.value.attempts == 1


def test_a_stalled_stream_times_out() -> None:
    with pytest.raises(LlmTimeout):
        call(EmulatedCloud(QUICK, fault="stall"), read_timeout_s=0.3)


def test_an_unreachable_base_url_is_named() -> None:
    with pytest.raises(LlmUnreachable, match="cannot connect"):
        call(None, url=closed_port_url())


def test_a_missing_or_wrong_key() -> None:
    with pytest.raises(LlmMissingApiKey, match="LAB_TEST_KEY is not set"):
        call(EmulatedCloud(QUICK, api_key=KEY), api_key_env="LAB_TEST_KEY")
    with pytest.raises(LlmAuthError, match="HTTP 401") as caught:
        call(EmulatedCloud(QUICK, api_key=KEY[::-1]), api_key=KEY, api_key_env="LAB_TEST_KEY")
    assert caught.value.status == 401
    [done] = call(EmulatedCloud(QUICK, api_key=KEY), api_key=KEY, api_key_env="LAB_TEST_KEY").of(CallEnd)
    assert done.finish_reason == "stop"


def test_retries_are_counted_and_visible() -> None:
    [done] = call(EmulatedCloud(QUICK, fault="500", fault_count=2), retries=2, retry_backoff_ms=5).of(CallEnd)
    assert dict(done.server_timings)["attempts"] == 3
    with pytest.raises(RateLimited, match=r"after 3 attempts") as caught:
        call(EmulatedCloud(QUICK, fault="429", retry_after_s=0), retries=2)
    assert caught.value.attempts == 3
    with pytest.raises(LlmProtocolError) as garbage:  # not worth retrying: the server is broken
        call(EmulatedCloud(QUICK, fault="garbage"), retries=2)
    assert garbage.value.attempts == 1


def test_no_retry_after_output_was_spoken() -> None:
    with pytest.raises(LlmConnectionError) as caught:
        call(EmulatedCloud(QUICK, fault="drop", fault_after=3), retries=3, retry_backoff_ms=1)
    assert caught.value.attempts == 1


# --- inside full turns: failures become rows, the run goes on -------------------------------------


async def turns_against(cloud: EmulatedCloud | None, url: str, n: int, **kwargs: Any) -> list[Any]:
    rows = TraceRows()
    api_key = kwargs.pop("api_key", None)
    try:
        if cloud is not None:
            await cloud.start()
        async with OpenAIChatBackend(settings(url or (cloud.base_url if cloud else ""), **kwargs), api_key) as b:
            return [rows.row(await cloud_turn(b)) for _ in range(n)] + [rows.path.read_text()]
    finally:
        if cloud is not None:
            await cloud.stop()
        rows.close()


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ("garbage", "LlmProtocolError"),
        ("429", "RateLimited"),
        ("500", "LlmHttpError"),
        ("drop", "LlmConnectionError"),
        ("stall", "LlmTimeout"),
    ],
)
def test_a_failing_call_fails_only_its_turn(fault: str, error: str) -> None:
    cloud = EmulatedCloud(QUICK, fault=fault, fault_count=1)
    failed, ok, _ = asyncio.run(turns_against(cloud, "", 2, read_timeout_s=0.3))
    assert (failed.ok, failed.error, failed.llm_calls) == (0, error, 1)
    assert (ok.ok, ok.error, ok.llm_calls) == (1, "", 1)
    assert ok.first_token_ms is not None and ok.server_prompt_ms is not None


def test_unreachable_and_missing_key_are_rows_too() -> None:
    [unreachable, _] = asyncio.run(turns_against(None, closed_port_url(), 1))
    assert (unreachable.ok, unreachable.error) == (0, "LlmUnreachable")
    [missing, _] = asyncio.run(turns_against(EmulatedCloud(QUICK), "", 1, api_key_env="LAB_TEST_KEY"))
    assert (missing.ok, missing.error) == (0, "LlmMissingApiKey")


def test_the_key_never_reaches_the_trace() -> None:
    cloud = EmulatedCloud(QUICK, api_key="another-key-entirely")
    [row, trace] = asyncio.run(turns_against(cloud, "", 1, api_key=KEY, api_key_env="LAB_TEST_KEY"))
    assert (row.ok, row.error) == (0, "LlmAuthError")
    assert KEY not in trace and KEY[:8] not in trace and "HTTP 401" in trace


@pytest.mark.parametrize(("question", "extra_calls"), [("Tell me something about tea.", 0), ("给我讲讲茶吧。", 1)])
def test_a_per_sentence_turn_against_the_emulated_cloud(question: str, extra_calls: int) -> None:
    async def main() -> tuple[Any, Any]:
        rows = TraceRows()
        try:
            async with EmulatedCloud(QUICK) as cloud, OpenAIChatBackend(settings(cloud.base_url)) as backend:
                timeline = await cloud_turn(backend, question, mode="per-sentence")
                return timeline, rows.row(timeline)
        finally:
            rows.close()

    timeline, row = asyncio.run(main())
    assert row.ok == 1, row
    spoken = [s.text for s in timeline.sentences]
    assert "".join(spoken).replace(" ", "") == pick_answer(question).replace(" ", "")
    assert row.sentences == len(spoken) >= 2
    # One call per sentence; a final "。" is a stop sequence too, so a last call finds nothing more to say
    # (a real server does the same), while a final "." is not followed by the space of the ". " stop.
    assert row.llm_calls == len(spoken) + extra_calls
    assert all(c.token_ns for c in timeline.calls)  # every call's first chunk was stamped
    spoke = [c for c in timeline.calls if c.first_token_ns is not None]
    assert len(spoke) == len(spoken) and all(c.token_ns[0] < c.first_token_ns for c in spoke)


def test_a_tool_call_turn_against_the_emulated_cloud() -> None:
    async def main() -> Any:
        rows = TraceRows()
        try:
            async with EmulatedCloud(QUICK) as cloud, OpenAIChatBackend(settings(cloud.base_url)) as backend:
                return rows.row(await cloud_turn(backend, "Turn on the kitchen light.", tools=True))
        finally:
            rows.close()

    row = asyncio.run(main())
    assert (row.ok, row.llm_calls) == (1, 2)
    assert row.first_token_ms is not None


def test_a_streamed_tool_call_is_timed_from_its_first_piece_and_its_completion_has_a_column() -> None:
    """M1: first output of any kind. The emulated cloud streams the call in three pieces, 150, 190 and 230 ms
    after the request; the row's first token is the first piece and tool_call_ms the last (virtual clock)."""
    paced = ComputeProfile("paced", ttft_ms=150, per_token_ms=40, slots=1)
    clock = VirtualClock()

    async def main() -> Any:
        rows = TraceRows()
        try:
            async with EmulatedCloud(paced) as cloud, OpenAIChatBackend(settings(cloud.base_url)) as backend:
                timeline = await cloud_turn(backend, "Turn on the kitchen light.", tools=True, clock=clock)
                return rows.row(timeline)
        finally:
            rows.close()

    row = run_on_clock(main(), clock)
    assert (row.ok, row.llm_calls) == (1, 2)
    assert row.first_token_ms == 150.0
    assert row.tool_call_ms == 230.0
    assert float(str(row.llm_first_token_ms_per_call).split(";")[0]) == 150.0


def test_emulator_label_names_the_profile() -> None:
    assert EmulatedCloud(get_compute_profile("busy")).label == "emulated cloud, profile busy"
    assert json.loads(json.dumps({"note": EmulatedCloud(QUICK).label}))["note"].endswith("quick")
