"""An OpenAI-compatible chat relay that times the LLM for a server the lab did not write.

A real xiaozhi server sends no ``traceparent`` and writes no spans, so the lab cannot see
when its LLM answered. Pointed at this relay instead of the LLM endpoint, the server's
chat requests pass through unchanged (body as sent, the upstream's own key put in place
of the caller's) and every request becomes one ``llm.call`` span: ``first_chunk`` when
the upstream's first streamed chunk arrived, ``first_token`` at its first chunk with
content or a tool call, and a ``chunk`` event at every later chunk with content, so an
analysis can tell how much of the answer existed at any moment (the first sentence a
server hands to its TTS). Times are the injected clock's, stamped as the bytes pass; the
relay adds one loopback hop, which the span does not hide: it starts when the request
reached the relay and ends when the last byte left it.

The relay never parses more than it must: SSE lines are read for timing only and passed
on byte for byte, and a non-streaming answer is passed on whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

from pipeline.clock import Clock
from pipeline.endpoints.doors import SlowBody, body_within
from pipeline.tracing import names
from pipeline.tracing.service_spans import RequestTiming

Record = Callable[[RequestTiming, str], Any]  # the request's timing and the caller's traceparent
EV_CHUNK = "chunk"  # a streamed chunk with content, after the first
_PASSED_HEADERS = ("Content-Type", "Accept")
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class LlmRelay:
    """Passes ``POST /v1/chat/completions`` on to ``upstream`` (a base URL ending /v1), timing each request."""

    def __init__(self, upstream: str, upstream_key: str, record: Record, clock: Clock) -> None:
        self.upstream = upstream.rstrip("/")
        self.upstream_key = upstream_key
        self.record, self.clock = record, clock
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            # no proxy from the environment: the upstream is a local process (METHOD M14's loopback)
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=120))
        return self._session

    def _headers(self, request: web.Request) -> dict[str, str]:
        headers = {k: request.headers[k] for k in _PASSED_HEADERS if k in request.headers}
        if self.upstream_key:
            headers["Authorization"] = f"Bearer {self.upstream_key}"
        return headers

    async def chat(self, request: web.Request, timing: RequestTiming, body_s: float) -> web.StreamResponse:
        """One chat request, passed on; ``timing`` (started when it arrived) is recorded however it ends;
        its body must arrive within ``body_s``."""
        traceparent = request.headers.get("traceparent", "")
        try:
            body = await body_within(request.read(), body_s)
            timing.attributes.update(_request_attributes(body))
            return await self._forward(request, body, timing)
        except SlowBody as exc:
            timing.error_type, timing.error_message = "request_timeout", str(exc)
            timing.attributes.setdefault(names.HTTP_STATUS, 408)
            return _error(408, str(exc), "invalid_request_error")
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
            timing.error_type, timing.error_message = "upstream_unreachable", f"{type(exc).__name__}: {exc}"[:300]
            timing.attributes.setdefault(names.HTTP_STATUS, 502)
            return _error(502, f"the relay's upstream {self.upstream} failed: {type(exc).__name__}")
        finally:
            timing.end_ns = self.clock.now_ns()
            self.record(timing, traceparent)

    async def _forward(self, request: web.Request, body: bytes, timing: RequestTiming) -> web.StreamResponse:
        url = f"{self.upstream}/chat/completions"
        async with self._client().post(url, data=body, headers=self._headers(request)) as up:
            timing.attributes[names.HTTP_STATUS] = up.status
            if up.status != 200 or up.content_type != "text/event-stream":
                payload = await up.read()
                now = self.clock.now_ns()
                if up.status != 200:
                    timing.error_type = f"http_{up.status}"
                    timing.error_message = payload[:300].decode("utf-8", "replace")
                else:
                    timing.events += [(names.EV_FIRST_CHUNK, now), (names.EV_FIRST_TOKEN, now)]
                return web.Response(body=payload, status=up.status, content_type=up.content_type)
            out = web.StreamResponse(status=200, headers=_SSE_HEADERS)
            await out.prepare(request)
            timing.attributes["lab.relay.chunks"] = 0
            try:
                async for line in up.content:
                    _note_chunk(timing, line, self.clock.now_ns())
                    if not await _pass_on(out, line, timing):
                        return out
            except (aiohttp.ClientError, TimeoutError):
                # The upstream broke mid-stream, after the 200 went out: no 502 can follow it, so the
                # caller's stream is cut as the upstream's was (else the caller waits on it forever).
                if request.transport is not None:
                    request.transport.abort()
                raise
            await _pass_on(out, b"", timing, eof=True)
            return out


async def _pass_on(out: web.StreamResponse, line: bytes, timing: RequestTiming, eof: bool = False) -> bool:
    """Writes on to the caller; False when the caller has gone. A caller may close once it has read what it
    wants (xiaozhi-esp32-server's OpenAI client closes at ``[DONE]``, before the stream's end): that is
    recorded, not a failure of the call, whose times stand."""
    try:
        await (out.write_eof() if eof else out.write(line))
    except ConnectionError:
        timing.attributes["lab.relay.caller_closed"] = True
        return False
    return True


def _note_chunk(timing: RequestTiming, line: bytes, now: int) -> None:
    """Stamps a chunk's arrival and takes what the upstream says of the prompt (usage, llama.cpp's timings)."""
    chunk = _chunk(line)
    if chunk is None:
        return
    counted = timing.attributes.get("lab.relay.chunks", 0)
    timing.attributes["lab.relay.chunks"] = (counted if isinstance(counted, int) else 0) + 1
    seen = {name for name, _ in timing.events}
    if names.EV_FIRST_CHUNK not in seen:
        timing.events.append((names.EV_FIRST_CHUNK, now))
    if _has_content(chunk):
        timing.events.append((names.EV_FIRST_TOKEN if names.EV_FIRST_TOKEN not in seen else EV_CHUNK, now))
    timing.attributes.update(_prompt_tokens(chunk))


def _chunk(line: bytes) -> dict[str, Any] | None:
    """An SSE line's chunk: {} when it is not JSON; None for no chunk (a comment, a blank line, ``[DONE]``)."""
    if not line.startswith(b"data:"):
        return None
    data = line[5:].strip()
    if not data or data == b"[DONE]":
        return None
    try:
        chunk = json.loads(data)
    except (ValueError, RecursionError):
        return {}
    return chunk if isinstance(chunk, dict) else {}


def _has_content(chunk: dict[str, Any]) -> bool:
    try:
        delta = chunk["choices"][0].get("delta") or {}
    except (KeyError, IndexError, TypeError, AttributeError):
        return False
    return bool(delta.get("content") or delta.get("tool_calls"))


def _prompt_tokens(chunk: dict[str, Any]) -> dict[str, int]:
    """The prompt's tokens and how many came from the upstream's cache: the state a first token depends on."""
    timings, usage = chunk.get("timings"), chunk.get("usage")
    if isinstance(timings, dict) and isinstance(timings.get("prompt_n"), int):
        cached = timings.get("cache_n") if isinstance(timings.get("cache_n"), int) else 0
        return {names.GEN_AI_INPUT_TOKENS: timings["prompt_n"] + cached, names.PROMPT_CACHED_TOKENS: cached}
    if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        found = {names.GEN_AI_INPUT_TOKENS: usage["prompt_tokens"]}
        return {**found, names.PROMPT_CACHED_TOKENS: cached} if isinstance(cached, int) else found
    return {}


def _request_attributes(body: bytes) -> dict[str, str | int | bool]:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # a caller's body, however deep its nesting, costs no exception
        return {}
    if not isinstance(data, dict):
        return {}
    attrs: dict[str, str | int | bool] = {names.GEN_AI_OPERATION: "chat"}
    attrs[names.GEN_AI_MODEL] = str(data.get("model", ""))
    attrs["lab.llm.stream"] = bool(data.get("stream", False))
    messages = data.get("messages")
    if isinstance(messages, list):
        attrs["lab.llm.messages"] = len(messages)
    return attrs


def _error(status: int, message: str, kind: str = "upstream_error") -> web.Response:
    error = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return web.json_response(error, status=status)
