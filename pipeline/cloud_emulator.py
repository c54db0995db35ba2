"""An emulated cloud LLM: an OpenAI-compatible streaming chat server whose compute is data.

For runs of condition A when no real endpoint is at hand. It serves
``POST /v1/chat/completions`` (SSE streaming and plain JSON) and ``GET /v1/models``
on 127.0.0.1, answers with short realistic sentences in the question's language
(a deterministic pick from a small bank, keyed by a hash of the question), calls the
device tools when asked to control a device, honours ``max_tokens`` and ``stop``,
and continues a trailing assistant message (per-sentence mode).

Its compute is a ``ComputeProfile``: time to first token (plus a per-prompt-token
cost), time per token, seeded jitter, and a number of slots (concurrent
generations) with a FIFO queue in front. It measures and reports its own timings in
the final chunk, the way llama.cpp's server does (``timings``: ``queue_ms`` waiting
for a slot, ``prompt_ms`` from slot to first token, ``predicted_ms`` from first to
last token, ``prompt_n``, ``predicted_n``), plus ``usage``, and names the matched
stop sequence in ``stop_reason`` as vLLM does. Time is the event loop's.

The named profiles are estimates (a cloud 70B-class API from REFERENCE.md's cited
300-600 ms first token; a busy one; zero compute for network measurements), so every
row measured against the emulator must say ``emulated cloud, profile X``
(``EmulatedCloud.label``).

Faults for tests (``fault`` or the ``X-Emulator-Fault`` request header): ``garbage``
(a 200 event stream of junk), ``not-sse`` (a 200 HTML page), ``429``, ``500``,
``drop`` (the connection is cut after ``fault_after`` tokens), ``stall`` (headers,
then silence); ``fault_count`` limits the fault to the first requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import random
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from yarl import URL

from pipeline.netem import LinkEmulator, get_profile

FAULTS = ("", "garbage", "not-sse", "429", "500", "drop", "stall")
FAULT_HEADER = "X-Emulator-Fault"


@dataclass(frozen=True, slots=True)
class ComputeProfile:
    """Server-side compute as data; delays in ms, each jittered uniformly in +-its jitter, floored at 0."""

    name: str
    ttft_ms: float = 0.0  # slot to first token for an empty prompt
    per_prompt_token_ms: float = 0.0
    per_token_ms: float = 0.0
    ttft_jitter_ms: float = 0.0
    token_jitter_ms: float = 0.0
    slots: int = 1
    seed: int = 0
    attribution: str = "estimated"

    def __post_init__(self) -> None:
        for key in ("ttft_ms", "per_prompt_token_ms", "per_token_ms", "ttft_jitter_ms", "token_jitter_ms"):
            if not getattr(self, key) >= 0:
                raise ValueError(f"compute profile {self.name!r}: {key} must be >= 0")
        if self.slots < 1:
            raise ValueError(f"compute profile {self.name!r}: slots must be at least 1")

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def delays_s(self, rng: random.Random, prompt_tokens: int, tokens: int) -> tuple[float, list[float]]:
        """Seconds from slot to first token, then between consecutive tokens."""

        def jittered(ms: float, jitter: float) -> float:
            return max(0.0, ms + (rng.uniform(-jitter, jitter) if jitter else 0.0)) / 1000

        first = jittered(self.ttft_ms + prompt_tokens * self.per_prompt_token_ms, self.ttft_jitter_ms)
        return first, [jittered(self.per_token_ms, self.token_jitter_ms) for _ in range(max(0, tokens - 1))]


COMPUTE_PROFILES: dict[str, ComputeProfile] = {
    p.name: p
    for p in (
        # A cloud 70B-class API (REFERENCE.md cites 300-600 ms to first token); ~45 tokens/s.
        ComputeProfile(
            "fast-70b-api",
            ttft_ms=320,
            per_prompt_token_ms=0.2,
            per_token_ms=22,
            ttft_jitter_ms=80,
            token_jitter_ms=6,
            slots=8,
            seed=21,
        ),
        # The same under load: slower, more jitter, two slots, so concurrent turns queue.
        ComputeProfile(
            "busy",
            ttft_ms=480,
            per_prompt_token_ms=0.4,
            per_token_ms=40,
            ttft_jitter_ms=200,
            token_jitter_ms=15,
            slots=2,
            seed=22,
        ),
        # Zero compute: what remains of first-token time is the network and the HTTP stack.
        ComputeProfile("instant", slots=64, seed=23),
    )
}


def get_compute_profile(name: str) -> ComputeProfile:
    try:
        return COMPUTE_PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown emulated-cloud profile {name!r}; known: {', '.join(COMPUTE_PROFILES)}") from None


# --- what it says --------------------------------------------------------------------------

_TOKEN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|\s*[A-Za-z0-9']+|\s*[^\sA-Za-z0-9'\u3400-\u9fff]|\s+")
_CJK = re.compile(r"[\u3400-\u9fff]")

ANSWERS = {
    "en": (
        "Sure. Here is the short answer. Let me know if you want more detail.",
        "Good question! The quick answer is yes, most of the time. It depends a little on where you are.",
        "I can help with that. It usually takes about ten minutes. Would you like a reminder?",
        "That is an interesting one. Most people get it wrong at first. The simple version is below.",
        "Okay. I looked it up for you. The answer is about three hundred.",
        "Of course. Here is what I know. It started a long time ago, in the early nineteen hundreds.",
        "Let me think. The best choice is the first one. It is cheaper and faster.",
        "Happy to help! Try a warm drink and a short walk. You will feel better soon.",
    ),
    "zh": (
        "好的。这个问题的答案很简单。还想了解更多吗？",
        "这是个好问题！一般来说是可以的。具体要看你在哪里。",
        "我来帮你。大概需要十分钟。要不要我提醒你？",
        "嗯，这个问题挺有意思。很多人第一次都会答错。简单地说，答案是三百左右。",
        "好的，我帮你查了一下。结果是大约三百个。",
        "当然可以。这件事发生在很久以前。大约是在二十世纪初。",
        "让我想想。第一个选择最好。它更便宜，也更快。",
        "没问题！喝点热水，出去走一走。你很快就会好起来的。",
    ),
}
TOOL_DONE = {"en": "Done. I have taken care of that for you.", "zh": "好的，已经帮你办好了。"}


def tokens_of(text: str) -> list[str]:
    """Roughly a tokenizer's split: one CJK character or one word (with its leading space) a token."""
    return _TOKEN.findall(text)


def language_of(text: str) -> str:
    return "zh" if _CJK.search(text) else "en"


def pick_answer(question: str) -> str:
    language = language_of(question)
    digest = hashlib.sha256(question.strip().encode("utf-8")).digest()
    bank = ANSWERS[language]
    return bank[int.from_bytes(digest[:4], "big") % len(bank)]


def pick_tool(question: str, offered: set[str]) -> tuple[str, str] | None:
    """A device-control question becomes a tool call when the tool is offered."""
    q = question.lower()
    if "set_light" in offered and ("light" in q or "lamp" in q or "灯" in q):
        on = not any(w in q for w in ("off", "关"))
        return "set_light", json.dumps({"on": on})
    if "set_volume" in offered and any(w in q for w in ("volume", "louder", "quieter", "音量", "声音")):
        number = re.search(r"\d+", q)
        return "set_volume", json.dumps({"level": int(number.group()) if number else 30})
    return None


@dataclass(frozen=True, slots=True)
class Plan:
    """What one request will stream: text tokens or a tool call, and how it finishes."""

    pieces: tuple[str, ...]
    finish_reason: str
    stop_reason: str | None = None
    tool: tuple[str, str] | None = None
    prompt_tokens: int = 0


class BadRequest(ValueError):
    """The request is not a chat completion request this server understands."""


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise BadRequest("'messages' must be a non-empty list of objects")
    return messages


def _stops(body: Mapping[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return [s for s in stop if s]
    raise BadRequest("'stop' must be a string or a list of strings")


def plan_reply(body: Mapping[str, Any], answers: Mapping[str, str] | None = None) -> Plan:
    """Decide the reply to a chat request (pure: the same request always gets the same plan)."""
    messages = _messages(body)
    max_tokens = body.get("max_tokens", 256)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise BadRequest("'max_tokens' must be a positive integer")
    stops = _stops(body)
    prompt_tokens = sum(len(tokens_of(str(m.get("content") or ""))) for m in messages)
    question = next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")
    offered = {str(t.get("function", {}).get("name")) for t in body.get("tools") or [] if isinstance(t, dict)}
    answered_tool = any(m.get("role") == "tool" for m in messages)
    if not answered_tool and (tool := pick_tool(question, offered)):
        return Plan((), "tool_calls", tool=tool, prompt_tokens=prompt_tokens)
    language = language_of(question)
    text = TOOL_DONE[language] if answered_tool else (answers or {}).get(question.strip()) or pick_answer(question)
    last = messages[-1]
    prefix = str(last.get("content") or "") if last.get("role") == "assistant" else ""
    remaining = text[len(prefix) :] if prefix and text.startswith(prefix) else ("" if prefix else text)
    stop_reason = None
    hits = [(remaining.find(s), s) for s in stops if remaining.find(s) >= 0]
    if hits:
        at, stop_reason = min(hits)
        remaining = remaining[:at]
    pieces = tokens_of(remaining)
    if len(pieces) > max_tokens:
        return Plan(tuple(pieces[:max_tokens]), "length", prompt_tokens=prompt_tokens)
    return Plan(tuple(pieces), "stop", stop_reason, prompt_tokens=prompt_tokens)


# --- how it serves -------------------------------------------------------------------------


class Slots:
    """``n`` concurrent generations; later requests wait in a strict FIFO queue."""

    def __init__(self, n: int) -> None:
        self.free = n
        self.waiting: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> None:
        if self.free > 0 and not self.waiting:
            self.free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # the slot was handed over just as the request went away
            else:
                self.waiting.remove(future)
            raise

    def release(self) -> None:
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_result(None)
                return
        self.free += 1


@dataclass(slots=True)
class _Timer:
    """The server's own timings of one request, on the event loop's clock."""

    received: float
    slot: float = 0.0
    first: float = 0.0
    last: float = 0.0

    def timings(self, plan: Plan, generated: int) -> dict[str, float]:
        first = self.first or self.last
        return {
            "queue_ms": round((self.slot - self.received) * 1000, 3),
            "prompt_ms": round((first - self.slot) * 1000, 3),
            "predicted_ms": round((self.last - first) * 1000, 3),
            "prompt_n": plan.prompt_tokens,
            "predicted_n": generated,
        }


class EmulatedCloud:
    """The server. ``await start()`` returns the port; ``base_url`` is what a client is given."""

    def __init__(
        self,
        profile: ComputeProfile,
        host: str = "127.0.0.1",
        port: int = 0,
        model: str = "emulated-cloud",
        api_key: str | None = None,
        fault: str = "",
        fault_after: int = 2,
        fault_count: int = 0,
        retry_after_s: int = 1,
        answers: Mapping[str, str] | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose one of: {', '.join(FAULTS[1:])} (or none)")
        self.profile = profile
        self.host, self.port = host, port
        self.model = model
        self.fault, self.fault_after, self.fault_count = fault, fault_after, fault_count
        self.retry_after_s = retry_after_s
        self.answers = dict(answers or {})
        self.requests = 0
        self.max_queue = 0
        self._api_key = api_key
        self._wall_clock = wall_clock
        self._slots = Slots(profile.slots)
        self._rng = random.Random(profile.seed)
        self._runner: web.AppRunner | None = None

    @property
    def label(self) -> str:
        return f"emulated cloud, profile {self.profile.name}"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def __aenter__(self) -> EmulatedCloud:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        return app

    async def start(self) -> int:
        # handler_cancellation: a request whose client went away stops and frees its slot, as vLLM does.
        self._runner = web.AppRunner(
            self.app(), access_log=None, handle_signals=False, shutdown_timeout=0.5, handler_cancellation=True
        )
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        self.port = int(self._runner.addresses[0][1])
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "lab"}]})

    def _fault(self) -> str:
        """The server-wide fault, for every request or only for the first ``fault_count``."""
        return self.fault if not self.fault_count or self.requests <= self.fault_count else ""

    def _refuse(self, request: web.Request) -> web.Response | None:
        if self._api_key and request.headers.get("Authorization") != f"Bearer {self._api_key}":
            return _error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        return None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        timer = _Timer(received=loop.time())
        self.requests += 1
        refused = self._refuse(request)
        if refused is not None:
            return refused
        fault = request.headers.get(FAULT_HEADER, self._fault())
        if fault == "429":
            return _error(429, "emulated overload", "rate_limit_error", retry_after_s=self.retry_after_s)
        if fault == "500":
            return _error(500, "emulated server failure", "server_error")
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise BadRequest("the body must be a JSON object")
            plan = plan_reply(body, self.answers)
        except (BadRequest, ValueError) as exc:
            return _error(400, str(exc), "invalid_request_error")
        rng = random.Random(self._rng.random())
        if fault in ("garbage", "not-sse", "stall"):
            return await _broken(request, fault)
        if not body.get("stream"):
            return await self._complete(plan, rng, timer)
        return await self._stream(request, body, plan, rng, timer, fault)

    async def _generate(self, plan: Plan, rng: random.Random, timer: _Timer) -> list[float]:
        """Wait for a slot; return the sleep before each piece (a tool call counts as three)."""
        if self._slots.free == 0 or self._slots.waiting:
            self.max_queue = max(self.max_queue, len(self._slots.waiting) + 1)
        await self._slots.acquire()
        timer.slot = asyncio.get_running_loop().time()
        count = 3 if plan.tool else len(plan.pieces)
        first, rest = self.profile.delays_s(rng, plan.prompt_tokens, max(count, 1))
        return [first, *rest][: max(count, 1)]

    async def _complete(self, plan: Plan, rng: random.Random, timer: _Timer) -> web.Response:
        loop = asyncio.get_running_loop()
        try:
            delays = await self._generate(plan, rng, timer)
            await asyncio.sleep(delays[0])
            timer.first = loop.time()
            await asyncio.sleep(sum(delays[1:]))
            timer.last = loop.time()
        finally:
            self._slots.release()
        message: dict[str, Any] = {"role": "assistant", "content": "".join(plan.pieces)}
        if plan.tool:
            message["tool_calls"] = [_tool_call(plan.tool, plan.tool[1])]
        return web.json_response(
            {
                **self._envelope("chat.completion"),
                "choices": [{"index": 0, "message": message, **_finish(plan)}],
                "usage": _usage(plan, len(plan.pieces) or (1 if plan.tool else 0)),
                "timings": timer.timings(plan, len(plan.pieces)),
            }
        )

    async def _stream(
        self, request: web.Request, body: dict[str, Any], plan: Plan, rng: random.Random, timer: _Timer, fault: str
    ) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        # vLLM-style: the role-only chunk goes out at once, before any compute.
        await self._chunk(resp, {"role": "assistant", "content": ""})
        generated = 0
        try:
            delays = await self._generate(plan, rng, timer)
            deltas = _deltas(plan)
            if not deltas:  # nothing to say still costs the prompt
                await asyncio.sleep(delays[0])
            for delay, delta in zip(delays, deltas, strict=False):
                await asyncio.sleep(delay)
                if fault == "drop" and generated >= self.fault_after:
                    _cut(request)
                    return resp
                await self._chunk(resp, delta)
                timer.last = loop.time()
                timer.first = timer.first or timer.last
                generated += 1
            timer.last = timer.last or loop.time()
        finally:
            self._slots.release()
        await self._chunk(resp, {}, _finish(plan))
        tail: dict[str, Any] = {"timings": timer.timings(plan, generated)}
        if (body.get("stream_options") or {}).get("include_usage"):
            tail["usage"] = _usage(plan, generated)
        await resp.write(_sse({**self._envelope("chat.completion.chunk"), "choices": [], **tail}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _chunk(
        self, resp: web.StreamResponse, delta: dict[str, Any], finish: dict[str, Any] | None = None
    ) -> None:
        choice = {"index": 0, "delta": delta, **(finish or {"finish_reason": None})}
        await resp.write(_sse({**self._envelope("chat.completion.chunk"), "choices": [choice]}))

    def _envelope(self, kind: str) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-emu{self.requests}",
            "object": kind,
            "created": int(self._wall_clock()),
            "model": self.model,
        }


def _deltas(plan: Plan) -> list[dict[str, Any]]:
    if plan.tool:
        arguments = plan.tool[1]
        half = len(arguments) // 2
        return [
            {"tool_calls": [{"index": 0, **_tool_call(plan.tool, "")}]},
            {"tool_calls": [{"index": 0, "function": {"arguments": arguments[:half]}}]},
            {"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]},
        ]
    return [{"content": piece} for piece in plan.pieces]


def _tool_call(tool: tuple[str, str], arguments: str) -> dict[str, Any]:
    return {"id": "call_emu0", "type": "function", "function": {"name": tool[0], "arguments": arguments}}


def _finish(plan: Plan) -> dict[str, Any]:
    return {"finish_reason": plan.finish_reason, "stop_reason": plan.stop_reason}


def _usage(plan: Plan, generated: int) -> dict[str, int]:
    return {
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": generated,
        "total_tokens": plan.prompt_tokens + generated,
    }


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"


def _error(
    status: int, message: str, kind: str, code: str | None = None, retry_after_s: int | None = None
) -> web.Response:
    headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None else None
    return web.json_response(
        {"error": {"message": message, "type": kind, "code": code}}, status=status, headers=headers
    )


def _cut(request: web.Request) -> None:
    """Drop the connection mid-stream, as a crashed server or a broken middlebox would."""
    if request.transport is not None:
        request.transport.abort()


async def _broken(request: web.Request, fault: str) -> web.StreamResponse:
    if fault == "not-sse":
        return web.Response(text="<html><body>502 Bad Gateway</body></html>", content_type="text/html")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    if fault == "stall":
        await asyncio.sleep(3600)  # cancelled when the client goes away or the server stops
    await resp.write(b'data: {"choices": [{"delta": {"content": "Hel\n\ndata: \xff\xfe garbage\n\n')
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


# --- what a run of condition A talks to ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the chat backend sends its requests, and what every row must say about it."""

    base_url: str
    connect_to: tuple[str, int] | None  # the link emulator in front, if any
    label: str  # e.g. "emulated cloud, profile busy; network internet"
    cloud: EmulatedCloud | None = None
    link: LinkEmulator | None = None


@contextlib.asynccontextmanager
async def serve_endpoint(
    base_url: str = "",
    emulator: str = "",
    network: str = "none",
    answers: Mapping[str, str] | None = None,
    api_key: str | None = None,
) -> AsyncIterator[Endpoint]:
    """Start what a run needs in front of its LLM: the emulated cloud (when ``emulator`` names a
    compute profile, else the real endpoint at ``base_url``) and the link emulator (unless
    ``network`` is ``none``). Unknown profile names raise ValueError before anything starts."""
    compute = get_compute_profile(emulator) if emulator else None
    link_profile = get_profile(network) if network != "none" else None
    async with contextlib.AsyncExitStack() as stack:
        cloud: EmulatedCloud | None = None
        if compute is not None:
            cloud = await stack.enter_async_context(EmulatedCloud(compute, answers=answers, api_key=api_key))
            base_url, label = cloud.base_url, cloud.label
        else:
            url = URL(base_url)
            label = f"cloud {url.host}:{url.port}"
        connect_to, link = None, None
        if link_profile is not None:
            url = URL(base_url)
            assert url.host is not None and url.port is not None, base_url
            link = await stack.enter_async_context(LinkEmulator(link_profile, url.host, url.port))
            connect_to = ("127.0.0.1", link.port)
        yield Endpoint(base_url, connect_to, f"{label}; network {network}", cloud, link)
