"""The emulated cloud: what it answers (pure), its queue (virtual clock), its wire format (loopback),
and the CI check of condition A's network segment recovered from the traces (M2, M14).
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import statistics
import subprocess
import sys
from typing import Any

import aiohttp
import pytest

from labtools.cloud_turns import TraceRows, cloud_turn, network_ms
from pipeline.clock import VirtualClock, run_on_clock
from pipeline.endpoints.cloud import (
    COMPUTE_PROFILES,
    FAULT_HEADER,
    BadRequest,
    ComputeProfile,
    EmulatedCloud,
    Slots,
    get_compute_profile,
    pick_answer,
    plan_reply,
    serve_endpoint,
)
from pipeline.endpoints.link import LinkEmulator, NetProfile
from pipeline.events import TokenDelta
from stages.llm import ChatRequest, Message
from stages.llm.openai import OpenAIChatBackend, OpenAISettings
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
TOOLS = [{"type": "function", "function": {"name": "set_light", "parameters": {}}}]


def body(question: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": question}], **extra}


# --- what it answers ------------------------------------------------------------------------


def test_answers_match_the_question_language_and_repeat() -> None:
    en = "".join(plan_reply(body("Why is the sky blue?")).pieces)
    zh = "".join(plan_reply(body("天空为什么是蓝色的？")).pieces)
    assert en == pick_answer("Why is the sky blue?") and en.count(".") + en.count("!") + en.count("?") >= 2
    assert any("\u4e00" <= c <= "\u9fff" for c in zh) and zh.endswith(("。", "？", "！"))
    assert "".join(plan_reply(body("Why is the sky blue?")).pieces) == en
    assert len({pick_answer(f"question {i}") for i in range(40)}) > 3  # the hash spreads over the bank


def test_given_answers_win_over_the_bank() -> None:
    plan = plan_reply(body(" What is 2+2? "), {"What is 2+2?": "Four."})
    assert "".join(plan.pieces) == "Four."


def test_stop_sequences_cut_the_answer_and_are_named() -> None:
    plan = plan_reply(body("天空为什么是蓝色的？", stop=["。", "？", "！"]))
    text = "".join(plan.pieces)
    assert plan.finish_reason == "stop" and plan.stop_reason in ("。", "？", "！")
    assert text + plan.stop_reason in pick_answer("天空为什么是蓝色的？")


def test_a_trailing_assistant_message_is_continued() -> None:
    answer = pick_answer("Tell me something")
    first = answer[: answer.index(". ") + 2]
    request = body("Tell me something", stop=[". ", "! ", "? "])
    request["messages"].append({"role": "assistant", "content": first})
    plan = plan_reply(request)
    assert answer.startswith(first + "".join(plan.pieces))
    last = dict(request, messages=[*request["messages"][:1], {"role": "assistant", "content": answer}])
    assert plan_reply(last).pieces == () and plan_reply(last).stop_reason is None  # nothing left: done


def test_max_tokens_gives_length() -> None:
    plan = plan_reply(body("Why is the sky blue?", max_tokens=3))
    assert len(plan.pieces) == 3 and plan.finish_reason == "length"


def test_device_control_becomes_a_tool_call_when_offered() -> None:
    plan = plan_reply(body("Turn off the kitchen light.", tools=TOOLS))
    assert plan.tool == ("set_light", '{"on": false}') and plan.finish_reason == "tool_calls"
    assert plan_reply(body("Turn off the kitchen light.")).tool is None  # no tools offered
    after = body("打开客厅的灯。", tools=TOOLS)
    after["messages"] += [{"role": "assistant", "content": None}, {"role": "tool", "content": "{}"}]
    assert "".join(plan_reply(after).pieces) == "好的，已经帮你办好了。"


@pytest.mark.parametrize(
    "bad", [{"messages": []}, {"messages": "hi"}, body("hi", max_tokens=0), body("hi", stop=[1])], ids=str
)
def test_bad_requests_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(BadRequest):
        plan_reply(bad)


def test_compute_profiles_are_data() -> None:
    with pytest.raises(
        ValueError,
        match="unknown emulated-cloud profile 'gpt-9'; known: fast-70b-api, fast-70b-api-unqueued, busy, instant",
    ):
        get_compute_profile("gpt-9")
    assert COMPUTE_PROFILES["busy"].as_dict()["slots"] == 2
    with pytest.raises(ValueError, match="slots"):
        ComputeProfile("x", slots=0)
    profile = ComputeProfile("x", ttft_ms=100, per_prompt_token_ms=1, per_token_ms=10, token_jitter_ms=2)
    import random

    first, rest = profile.delays_s(random.Random(1), prompt_tokens=50, tokens=4)
    assert first == pytest.approx(0.150) and len(rest) == 3 and all(0.008 <= r <= 0.012 for r in rest)


def test_slots_queue_in_fifo_order_on_the_virtual_clock() -> None:
    clock = VirtualClock()
    slots = Slots(1)
    waits: dict[str, float] = {}

    async def request(name: str, arrive: float) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(arrive)
        t = loop.time()
        await slots.acquire()
        waits[name] = round(loop.time() - t, 6)
        await asyncio.sleep(0.100)
        slots.release()

    async def main() -> None:
        await asyncio.gather(request("a", 0), request("b", 0.010), request("c", 0.020), request("d", 0.500))

    run_on_clock(main(), clock)
    assert waits == {"a": 0.0, "b": 0.090, "c": 0.180, "d": 0.0}


def test_a_slow_writer_makes_a_token_late_once_not_every_token_later(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each token is due at a time counted from the slot: a loop that takes 5 ms to write every token (a busy
    server, in virtual time) delays each by those 5 ms, and the answer's pace stays the profile's."""
    clock = VirtualClock()
    write = EmulatedCloud._chunk

    async def slow_write(self: EmulatedCloud, *args: Any) -> None:
        await write(self, *args)
        await asyncio.sleep(0.005)

    monkeypatch.setattr(EmulatedCloud, "_chunk", slow_write)

    async def main() -> tuple[int, bytes]:
        async with EmulatedCloud(ComputeProfile("paced", ttft_ms=100, per_token_ms=20)) as cloud:
            return await post(cloud.base_url + "/chat/completions", body("What day is it today?", stream=True))

    status, raw = run_on_clock(main(), clock)
    timings = events(raw)[-2]["timings"]
    assert status == 200 and timings["predicted_n"] > 3
    # the role chunk's write (5 ms) comes before the slot; the first token is written 100 ms after the slot and
    # returns 5 ms later; from there every token is due 20 ms after the one before, and only the last one's write
    # (5 ms) adds to the answer (a sleep per token: 25 ms a token)
    assert (timings["prompt_ms"], timings["predicted_ms"]) == (105.0, 20.0 * (timings["predicted_n"] - 1) + 5)


# --- on the wire (loopback, real clock) ---------------------------------------------------------


async def post(url: str, payload: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as session, session.post(url, json=payload, headers=headers) as resp:
        return resp.status, await resp.read()


async def post_watching_first_content(url: str, payload: dict[str, Any]) -> tuple[int, bytes, float]:
    """POST and read the stream; also the ms from sending to the first chunk that carries text."""
    loop = asyncio.get_running_loop()
    raw, first_ms = b"", 0.0
    async with aiohttp.ClientSession() as session:
        sent = loop.time()
        async with session.post(url, json=payload) as resp:
            async for line in resp.content:
                raw += line
                if not first_ms and line.startswith(b"data: {"):
                    choices = json.loads(line[6:]).get("choices")
                    if choices and choices[0]["delta"].get("content"):
                        first_ms = (loop.time() - sent) * 1000
            return resp.status, raw, first_ms


def events(raw: bytes) -> list[Any]:
    out = []
    for block in raw.decode().split("\n\n"):
        if block.startswith("data: "):
            data = block[6:]
            out.append(None if data == "[DONE]" else json.loads(data))
    return out


def test_streams_openai_chunks_with_its_own_timings() -> None:
    profile = ComputeProfile("t", ttft_ms=60, per_token_ms=5)

    async def main() -> tuple[int, bytes, float]:
        async with EmulatedCloud(profile) as cloud:
            request = body("What day is it today?", stream=True, stream_options={"include_usage": True})
            return await post_watching_first_content(cloud.base_url + "/chat/completions", request)

    status, raw, client_first_ms = asyncio.run(main())
    chunks = events(raw)
    assert status == 200 and chunks[-1] is None
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:-2] if c["choices"])
    assert text == pick_answer("What day is it today?")
    finish = chunks[-3]["choices"][0]
    assert (finish["finish_reason"], finish["stop_reason"]) == ("stop", None)
    tail = chunks[-2]
    assert tail["choices"] == [] and tail["usage"]["completion_tokens"] == tail["timings"]["predicted_n"] > 3
    timings = tail["timings"]
    # The server and the client share one event loop clock, so the server's interval from receipt
    # to first token must lie inside the client's from send to first content; an upper bound in
    # milliseconds would only measure how loaded the machine is (a CI run saw 128 ms for 60).
    assert timings["queue_ms"] >= 0 and timings["prompt_ms"] >= 60
    assert timings["queue_ms"] + timings["prompt_ms"] <= client_first_ms
    assert timings["predicted_ms"] >= 5 * (timings["predicted_n"] - 1)


def test_plain_json_models_auth_and_bad_requests() -> None:
    async def main() -> list[tuple[int, Any]]:
        async with EmulatedCloud(get_compute_profile("instant"), api_key="sk-test", model="qwen-emu") as cloud:
            auth = {"Authorization": "Bearer sk-test"}
            results = []
            for payload, headers in (
                (body("Hi there"), auth),
                (body("Hi there"), {"Authorization": "Bearer wrong"}),
                ({"messages": []}, auth),
            ):
                status, raw = await post(cloud.base_url + "/chat/completions", payload, headers)
                results.append((status, json.loads(raw)))
            async with aiohttp.ClientSession() as session, session.get(cloud.base_url + "/models") as resp:
                results.append((resp.status, await resp.json()))
            return results

    plain, wrong_key, bad, models = asyncio.run(main())
    assert plain[0] == 200 and plain[1]["choices"][0]["message"]["content"] == pick_answer("Hi there")
    assert set(plain[1]["timings"]) == {"queue_ms", "prompt_ms", "predicted_ms", "prompt_n", "predicted_n"}
    assert wrong_key[0] == 401 and wrong_key[1]["error"]["code"] == "invalid_api_key"
    assert bad[0] == 400 and "messages" in bad[1]["error"]["message"]
    assert models == (200, {"object": "list", "data": [{"id": "qwen-emu", "object": "model", "owned_by": "lab"}]})


MALFORMED: dict[str, tuple[dict[str, Any], str, str, str]] = {
    "tools[].function a string": (
        body("Turn on the light.", tools=[{"type": "function", "function": "set_light"}]),
        "tools[0].function",
        "invalid_type",
        "Invalid type for 'tools[0].function': expected an object, but got a string instead.",
    ),
    "tools[].function missing": (
        body("Hi", tools=[{"type": "function"}]),
        "tools[0].function",
        "missing_required_parameter",
        "Missing required parameter: 'tools[0].function'.",
    ),
    "tools[].function.name a number": (
        body("Hi", tools=[*TOOLS, {"type": "function", "function": {"name": 7}}]),
        "tools[1].function.name",
        "invalid_type",
        "Invalid type for 'tools[1].function.name': expected a string, but got an integer instead.",
    ),
    "tools an object": (
        body("Hi", tools={"set_light": {}}),
        "tools",
        "invalid_type",
        "Invalid type for 'tools': expected an array, but got an object instead.",
    ),
    "stream_options a string": (
        body("Hi", stream=True, stream_options="include_usage"),
        "stream_options",
        "invalid_type",
        "Invalid type for 'stream_options': expected an object, but got a string instead.",
    ),
    "stream_options.include_usage a string": (
        body("Hi", stream=True, stream_options={"include_usage": "yes"}),
        "stream_options.include_usage",
        "invalid_type",
        "Invalid type for 'stream_options.include_usage': expected a boolean, but got a string instead.",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_request_is_refused_as_openai_refuses_it(case: str) -> None:
    """The attack: a malformed ``tools[].function`` was a 500, a non-object ``stream_options`` a stream cut after
    its first chunk. Both are OpenAI's 400, naming the parameter, and the server goes on."""
    payload, param, code, message = MALFORMED[case]
    with pytest.raises(BadRequest, match=re.escape(message)):
        plan_reply(payload)

    async def main() -> tuple[tuple[int, bytes], tuple[int, bytes]]:
        async with EmulatedCloud(get_compute_profile("instant")) as cloud:
            refused = await post(cloud.base_url + "/chat/completions", payload)
            return refused, await post(cloud.base_url + "/chat/completions", body("Hi", stream=True))

    (status, raw), (next_status, _) = asyncio.run(main())
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    assert (status, json.loads(raw)) == (400, {"error": error})
    assert next_status == 200


def test_a_callers_fault_header_is_honoured_only_where_the_emulator_allows_it() -> None:
    """The attack: any caller could make the emulator fail with ``X-Emulator-Fault``."""

    async def main(allow: bool) -> tuple[int, bytes]:
        async with EmulatedCloud(get_compute_profile("instant"), allow_fault_header=allow) as cloud:
            return await post(cloud.base_url + "/chat/completions", body("Hi"), {FAULT_HEADER: "500"})

    status, raw = asyncio.run(main(allow=False))
    assert status == 200 and json.loads(raw)["choices"][0]["message"]["content"] == pick_answer("Hi")
    status, raw = asyncio.run(main(allow=True))
    error = {"message": "emulated server failure", "type": "server_error", "param": None, "code": None}
    assert (status, json.loads(raw)) == (500, {"error": error})


def test_requests_beyond_the_slots_wait_and_the_wait_is_reported() -> None:
    profile = ComputeProfile("one-slot", ttft_ms=80, slots=1)

    async def main() -> tuple[list[dict[str, float]], int]:
        async with EmulatedCloud(profile) as cloud:
            url = cloud.base_url + "/chat/completions"
            answers = await asyncio.gather(*(post(url, body(f"question {i}", max_tokens=1)) for i in range(3)))
            return [json.loads(raw)["timings"] for _, raw in answers], cloud.max_queue

    timings, max_queue = asyncio.run(main())
    queues = sorted(t["queue_ms"] for t in timings)
    assert max_queue == 2
    assert queues[0] < 10 and 80 <= queues[1] < 110 and 160 <= queues[2] < 210


# --- what a run starts in front of its LLM -------------------------------------------------------


def test_serve_endpoint_starts_the_emulator_and_the_link_emulator() -> None:
    links = 0

    async def main() -> tuple[str, str, int, str]:
        nonlocal links
        async with serve_endpoint(emulator="instant", network="lan") as endpoint:
            assert endpoint.connect_to is not None
            backend = OpenAIChatBackend(OpenAISettings(endpoint.base_url, "m"), connect_to=endpoint.connect_to)
            async with backend:
                chunks = [c async for c in backend.stream(ChatRequest((Message("user", "Hi"),), 64))]
            text = "".join(c.text for c in chunks if isinstance(c, TokenDelta))
            links = endpoint.link.connections if endpoint.link else 0
            return endpoint.label, text, endpoint.connect_to[1], backend.server_address

    label, text, proxy_port, address = asyncio.run(main())
    assert label == "emulated cloud, profile instant; network lan" and text == pick_answer("Hi")
    assert not address.endswith(f":{proxy_port}")  # spans name the endpoint, not the emulator in front
    assert links == 1


@pytest.mark.parametrize(
    ("emulator", "network", "message"), [("gpt-9", "none", "emulated-cloud"), ("", "5g", "network")]
)
def test_serve_endpoint_refuses_unknown_profiles_before_starting(emulator: str, network: str, message: str) -> None:
    async def main() -> None:
        async with serve_endpoint("http://127.0.0.1:9/v1", emulator, network):
            raise AssertionError("started")

    with pytest.raises(ValueError, match=f"unknown {message} profile"):
        asyncio.run(main())


# --- the entry point ------------------------------------------------------------------------------


def test_the_entry_point_serves_until_stopped_and_refuses_unknown_profiles() -> None:
    command = [sys.executable, "-m", "pipeline.endpoints.cloud", "--port", "0", "--profile", "instant"]
    bad = subprocess.run([*command, "--network", "wan"], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert bad.returncode == 2 and "unknown network profile 'wan'; known: loopback" in bad.stderr
    proc = subprocess.Popen([*command, "--network", "lan"], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        direct, proxied = proc.stdout.readline().strip(), proc.stdout.readline().strip()
        assert direct.startswith("emulated cloud, profile instant: http://127.0.0.1:")
        assert proxied.startswith("through network profile lan: http://127.0.0.1:")
        url = proxied.split(": ", 1)[1] + "/chat/completions"
        status, raw = asyncio.run(post(url, body("Hi"), {FAULT_HEADER: "500"}))  # not allowed: ignored
        assert status == 200 and json.loads(raw)["choices"][0]["message"]["content"] == pick_answer("Hi")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_the_entry_point_takes_a_callers_fault_only_when_told_to() -> None:
    command = [sys.executable, "-m", "pipeline.endpoints.cloud", "--port", "0", "--profile", "instant"]
    proc = subprocess.Popen([*command, "--allow-fault-header"], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip().split(": ", 1)[1] + "/chat/completions"
        assert asyncio.run(post(url, body("Hi"), {FAULT_HEADER: "429"}))[0] == 429
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


# --- the CI check: the network segment recovered from the traces matches the profile's RTT ----------

# Measured: single-call turns through run_turn -> LlmStage -> OpenAIChatBackend (keep-alive, connect_to)
# -> LinkEmulator (fixed RTT, no jitter) -> EmulatedCloud; rows computed from the OTLP JSON traces;
# network = first_token_ms - (server_queue_ms + server_prompt_ms); excess = network - configured RTT.
# `python scripts/bench_network.py --pipeline-turns 200` on the 2-core VM (load average ~0.8 from other
# work), RTT 0 / 10 / 30 ms: excess median 1.00 / 1.07 / 1.07 ms, P90 1.15 / 1.32 / 1.24,
# min 0.70 / 0.64 / 0.68, max 1.30 / 5.13 / 1.39 ms (two earlier runs: medians 0.80-1.31, max <= 6.9).
# With two CPU-bound processes added (`--profiles lan --n 50 --http-n 0 --pipeline-turns 200`):
# median 1.02 / 1.05 / 3.71 ms, P90 8.84 / 5.07 / 13.71, min 0.60 / 0.66 / 0.89, max 29.3 / 15.0 / 31.2.
# The excess is the HTTP stack (request build and parse on both sides; CallStart precedes the request
# headers leaving by 0.05-0.25 ms); the first turn of a connection also pays the TCP handshake (one RTT).
# Tolerances, wide enough for a loaded CI machine, tight where load cannot reach:
# no turn below the configured RTT - 0.5 ms; the best turn within 3 ms of it; the median within 8 ms.
CI_RTT_MS = 30.0
TOLERANCE_BELOW_MS = 0.5
TOLERANCE_BEST_MS = 3.0
TOLERANCE_MEDIAN_MS = 8.0


def test_network_segment_from_traces_matches_the_configured_rtt() -> None:
    profile = ComputeProfile("ci", ttft_ms=25, per_token_ms=1, slots=4)
    network = NetProfile("ci-fixed-30ms", rtt_ms=CI_RTT_MS)
    rows = TraceRows()

    async def main() -> list[float]:
        async with (
            EmulatedCloud(profile) as cloud,
            LinkEmulator(network, "127.0.0.1", cloud.port) as link,
            OpenAIChatBackend(
                OpenAISettings(cloud.base_url, "emulated"), connect_to=("127.0.0.1", link.port)
            ) as backend,
        ):
            segments = []
            for _ in range(11):
                row = rows.row(await cloud_turn(backend), note=cloud.label)
                assert row.ok == 1, row
                assert row.server_prompt_ms >= 25  # type: ignore[operator]
                segments.append(network_ms(row))
            assert link.connections == 1  # one kept-alive connection for every turn
            return segments

    try:
        segments = asyncio.run(main())
    finally:
        rows.close()
    first, excess = segments[0], [s - CI_RTT_MS for s in segments[1:]]
    assert 2 * CI_RTT_MS - TOLERANCE_BELOW_MS <= first <= 2 * CI_RTT_MS + 40  # handshake RTT + the exchange
    assert min(excess) >= -TOLERANCE_BELOW_MS, excess
    assert min(excess) <= TOLERANCE_BEST_MS, excess
    assert statistics.median(excess) <= TOLERANCE_MEDIAN_MS, excess


def test_network_segment_is_exact_on_the_virtual_clock() -> None:
    """The same chain on the virtual clock (real loopback sockets, virtual time): CPU costs nothing,
    so the recovered segment is exactly the configured RTT, and exactly twice it on a new connection."""
    clock = VirtualClock()
    rows = TraceRows()

    async def main() -> list[tuple[Any, ...]]:
        async with (
            EmulatedCloud(ComputeProfile("ci", ttft_ms=25, per_token_ms=5, slots=4)) as cloud,
            LinkEmulator(NetProfile("ci-fixed-30ms", rtt_ms=CI_RTT_MS), "127.0.0.1", cloud.port) as link,
            OpenAIChatBackend(OpenAISettings(cloud.base_url, "e"), connect_to=("127.0.0.1", link.port)) as backend,
        ):
            out = []
            for _ in range(3):
                row = rows.row(await cloud_turn(backend, clock=clock))
                out.append((row.ok, row.first_token_ms, row.server_queue_ms, row.server_prompt_ms))
            return out

    try:
        got = run_on_clock(main(), clock)
    finally:
        rows.close()
    assert got == [(1, 85.0, 0.0, 25.0), (1, 55.0, 0.0, 25.0), (1, 55.0, 0.0, 25.0)]  # 2 x 30 + 25, then 30 + 25
