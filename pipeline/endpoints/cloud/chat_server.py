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

The named profiles are estimates (a cloud 70B-class API from docs/reference/cited.md's cited
300-600 ms first token; a busy one; zero compute for network measurements), so every
row measured against the emulator must say ``emulated cloud, profile X``
(``EmulatedCloud.label``).

Faults for tests (``fault``, or the ``X-Emulator-Fault`` request header when started with
``allow_fault_header``; a caller's header is ignored otherwise): ``garbage``
(a 200 event stream of junk), ``not-sse`` (a 200 HTML page), ``429``, ``500``,
``drop`` (the connection is cut after ``fault_after`` tokens), ``stall`` (headers,
then silence); ``fault_count`` limits the fault to the first requests.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from pipeline.endpoints.cloud.answers import BadRequest, StreamPlan, include_usage, plan_reply
from pipeline.endpoints.cloud.compute import ComputeProfile, Slots, Timer
from pipeline.endpoints.cloud.faults import FAULT_HEADER, FAULTS, broken, cut, error
from pipeline.endpoints.doors import SlowBody, body_within
from pipeline.endpoints.serving import HttpApp


class EmulatedCloud(HttpApp):
    """The server. ``await start()`` returns the port; ``base_url`` is what a client is given."""

    cancel_abandoned = True  # a request whose client went away stops and frees its slot, as vLLM does

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
        allow_fault_header: bool = False,
    ) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose one of: {', '.join(FAULTS[1:])} (or none)")
        super().__init__(host, port)
        self.profile = profile
        self.model = model
        self.fault, self.fault_after, self.fault_count = fault, fault_after, fault_count
        self.retry_after_s = retry_after_s
        self.allow_fault_header = allow_fault_header  # a request may ask for a fault (tests only)
        self.answers = dict(answers or {})
        self.requests = 0
        self.max_queue = 0
        self._api_key = api_key
        self._wall_clock = wall_clock
        self._slots = Slots(profile.slots)
        self._rng = random.Random(profile.seed)

    @property
    def label(self) -> str:
        return f"emulated cloud, profile {self.profile.name}"

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        return app

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "lab"}]})

    def _fault(self, request: web.Request) -> str:
        """The fault the request asked for, where that is allowed; else the server-wide one, for every request or
        only for the first ``fault_count``."""
        if self.allow_fault_header and FAULT_HEADER in request.headers:
            return request.headers[FAULT_HEADER]
        return self.fault if not self.fault_count or self.requests <= self.fault_count else ""

    def _refuse(self, request: web.Request) -> web.Response | None:
        if self._api_key and request.headers.get("Authorization") != f"Bearer {self._api_key}":
            return error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        return None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        timer = Timer(received=loop.time())
        self.requests += 1
        refused = self._refuse(request)
        if refused is not None:
            return refused
        fault = self._fault(request)
        if fault == "429":
            return error(429, "emulated overload", "rate_limit_error", retry_after_s=self.retry_after_s)
        if fault == "500":
            return error(500, "emulated server failure", "server_error")
        try:
            body = await body_within(request.json(), self.limits.body_s)
            if not isinstance(body, dict):
                raise BadRequest("the body must be a JSON object")
            plan = plan_reply(body, self.answers)
        except BadRequest as exc:
            return error(400, str(exc)[:200], "invalid_request_error", exc.code, param=exc.param)
        except SlowBody as exc:
            return error(408, str(exc), "invalid_request_error", "request_timeout")
        except (ValueError, RecursionError) as exc:  # not JSON (nested past the decoder's depth included)
            return error(400, str(exc)[:200] or type(exc).__name__, "invalid_request_error")
        rng = random.Random(self._rng.random())
        if fault in ("garbage", "not-sse", "stall"):
            return await broken(request, fault)
        if not body.get("stream"):
            return await self._complete(plan, rng, timer)
        return await self._stream(request, body, plan, rng, timer, fault)

    async def _generate(self, plan: StreamPlan, rng: random.Random, timer: Timer) -> list[float]:
        """Wait for a slot; return the sleep before each piece (a tool call counts as three)."""
        if self._slots.free == 0 or self._slots.waiting:
            self.max_queue = max(self.max_queue, len(self._slots.waiting) + 1)
        await self._slots.acquire()
        timer.slot = asyncio.get_running_loop().time()
        count = 3 if plan.tool else len(plan.pieces)
        first, rest = self.profile.delays_s(rng, plan.prompt_tokens, max(count, 1))
        return [first, *rest][: max(count, 1)]

    async def _complete(self, plan: StreamPlan, rng: random.Random, timer: Timer) -> web.Response:
        loop = asyncio.get_running_loop()
        try:
            delays = await self._generate(plan, rng, timer)
            await _until(timer.slot + delays[0])
            timer.first = loop.time()
            await _until(timer.first + sum(delays[1:]))
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
                "timings": timer.timings(plan.prompt_tokens, len(plan.pieces)),
            }
        )

    async def _stream(
        self, request: web.Request, body: dict[str, Any], plan: StreamPlan, rng: random.Random, timer: Timer, fault: str
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
                await _until(timer.slot + delays[0])
            due = timer.slot
            for delay, delta in zip(delays, deltas, strict=False):
                due += delay
                await _until(due)
                if fault == "drop" and generated >= self.fault_after:
                    cut(request)
                    return resp
                await self._chunk(resp, delta)
                timer.last = loop.time()
                if not timer.first:  # the tokens after it are due from when it went out: never sooner than the
                    timer.first = due = timer.last  # profile's pace after a late first token
                generated += 1
            timer.last = timer.last or loop.time()
        finally:
            self._slots.release()
        await self._chunk(resp, {}, _finish(plan))
        tail: dict[str, Any] = {"timings": timer.timings(plan.prompt_tokens, generated)}
        if include_usage(body):  # checked by plan_reply before the stream began
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


def _deltas(plan: StreamPlan) -> list[dict[str, Any]]:
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


def _finish(plan: StreamPlan) -> dict[str, Any]:
    return {"finish_reason": plan.finish_reason, "stop_reason": plan.stop_reason}


def _usage(plan: StreamPlan, generated: int) -> dict[str, int]:
    return {
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": generated,
        "total_tokens": plan.prompt_tokens + generated,
    }


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"


async def _until(due: float) -> None:
    """Sleep until ``due`` on the loop's clock. The first token is due at a time counted from the slot, each later
    one from when the first went out, not from when the one before went out: a remote model goes on generating
    while our loop is busy, so a late loop sends a token late once, and that lateness does not add up over the
    answer's tokens (it did with a sleep per token)."""
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, due - loop.time()))
