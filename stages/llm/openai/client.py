"""A cloud LLM: an OpenAI-compatible streaming chat client (condition A, METHOD M13).

Works with any ``/chat/completions`` endpoint that streams Server-Sent Events:
OpenAI, DashScope's compatible mode, DeepSeek, vLLM, a llama.cpp server, the lab's
emulated cloud. The base URL, model and the *name* of the API-key variable are
settings; the key's value is handed in by the entry point and never appears in a
message, a trace or a repr.

What the pipeline sees, so that the single timing wrapper can time it:
- the first SSE chunk (often a role-only delta) as an empty ``TokenDelta``: the recorder
  stamps it but does not count it as the first token;
- every non-empty content delta as a ``TokenDelta`` the moment its line is parsed: the
  first one is the first token;
- a tool call as one ``ToolCall`` once its streamed arguments are complete;
- ``CallEnd`` with the finish reason, usage, the server's own timings when it sends them
  (llama.cpp ``timings``, the emulated cloud's ``queue_ms``), and ``attempts``.

Connections are kept alive and reused across calls and turns (one aiohttp session
per backend, created on the first call), as a voice server keeps its HTTP client:
only the first call (the warm-up round, M6) pays for TCP (and TLS) set-up.

Failures become exceptions whose class names are stable error classes for the row
(``LlmHttpError``, ``RateLimited``, ``LlmAuthError``, ``LlmTimeout``,
``LlmUnreachable``, ``LlmConnectionError``, ``LlmProtocolError``, ``LlmServerError``,
``LlmMissingApiKey``). Retries are off by default; when enabled they happen only
before any output was produced, and the number of attempts is always reported.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

import aiohttp
from yarl import URL

from stages.llm.backend import ChatRequest, Chunk
from stages.llm.openai.errors import (
    CloudLlmError,
    LlmAuthError,
    LlmConnectionError,
    LlmHttpError,
    LlmMissingApiKey,
    LlmProtocolError,
    LlmTimeout,
    LlmUnreachable,
    RateLimited,
    redact,
    retryable,
)
from stages.llm.openai.request import OpenAISettings, request_body
from stages.llm.openai.shaper import StreamShaper
from stages.llm.openai.sse import SseLines

RETRY_AFTER_CAP_S = 10.0


class OpenAIChatBackend:
    """A ``ChatBackend`` over an OpenAI-compatible endpoint; one per run (it owns the connections).

    ``connect_to`` sends every connection to that ``(host, port)`` instead (a link emulator
    in front of the endpoint, like curl's ``--connect-to``): the endpoint's own name stays
    in the Host header and names the server for TLS, so certificates stay valid and spans
    name the real endpoint. ``trace_configs`` lets an orchestrating caller attach
    aiohttp's request hooks (for instance to measure when the request left); this stage
    never reads the clock itself. Close it with ``await aclose()`` (or ``async with``).
    """

    def __init__(
        self,
        settings: OpenAISettings,
        api_key: str | None = None,
        trace_configs: Sequence[aiohttp.TraceConfig] = (),
        connect_to: tuple[str, int] | None = None,
    ) -> None:
        self.settings = settings
        self.model = settings.model
        url = URL(settings.base_url)
        self.server_address = f"{url.host}:{url.port}"
        self._url = str(url / "chat/completions")
        self._target = self._url
        self._host_header: dict[str, str] = {}
        self._tls_name: str | None = None
        if connect_to:
            self._target = str(url.with_host(connect_to[0]).with_port(connect_to[1]) / "chat/completions")
            self._host_header = {"Host": url.authority}
            self._tls_name = url.host if url.scheme == "https" else None
        self._key = api_key or None
        self._trace_configs = list(trace_configs)
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        public = URL(self._url).with_user(None).with_password(None).with_query(None)
        return f"OpenAIChatBackend(model={self.model!r}, url={str(public)!r})"

    async def __aenter__(self) -> OpenAIChatBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            keepalive = self.settings.keepalive_s
            connector = aiohttp.TCPConnector(force_close=not keepalive, keepalive_timeout=keepalive or None)
            timeout = aiohttp.ClientTimeout(
                total=None, sock_connect=self.settings.connect_timeout_s, sock_read=self.settings.read_timeout_s
            )
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=timeout, trace_configs=self._trace_configs or None
            )
            self._loop = loop
        return self._session

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream", "Accept-Encoding": "identity", **self._host_header}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        return headers

    async def stream(self, request: ChatRequest) -> AsyncIterator[Chunk]:
        if self.settings.api_key_env and not self._key:
            raise LlmMissingApiKey(
                f"the API key variable {self.settings.api_key_env} is not set (needed for {self.server_address})"
            )
        body = request_body(self.settings, request)
        attempts = 0
        while True:
            attempts += 1
            shaper = StreamShaper(request)
            try:
                async with contextlib.aclosing(self._events(body)) as events:  # the response is released at once
                    async for payload in events:
                        for chunk in shaper.feed(payload):
                            yield chunk
                last = shaper.finish(attempts)
                break
            except CloudLlmError as exc:
                exc.args = (redact(str(exc), self._key),)  # parser errors quote the stream, which may echo the key
                exc.attempts = attempts
                if shaper.produced or attempts > self.settings.retries or not retryable(exc):
                    if attempts > 1:
                        exc.args = (f"{exc} (after {attempts} attempts)",)
                    raise
                await asyncio.sleep(self._backoff_s(exc, attempts))
        for chunk in last:
            yield chunk

    def _backoff_s(self, exc: CloudLlmError, attempts: int) -> float:
        if isinstance(exc, LlmHttpError) and exc.retry_after_s is not None:
            return min(exc.retry_after_s, RETRY_AFTER_CAP_S)
        return float(self.settings.retry_backoff_ms / 1000 * 2 ** (attempts - 1))

    async def _events(self, body: dict[str, Any]) -> AsyncGenerator[dict[str, Any] | None, None]:
        """The payloads of one attempt; the response is fully read and released before it ends."""
        try:
            post = self._client().post(self._target, json=body, headers=self._headers(), server_hostname=self._tls_name)
            async with post as resp:
                if resp.status >= 400:
                    raise await self._http_error(resp)
                kind = resp.headers.get("Content-Type", "")
                if not kind.startswith("text/event-stream"):
                    raise LlmProtocolError(f"expected an event stream, got {resp.status} {kind or 'no content type'}")
                sse = SseLines()
                async for raw in resp.content:
                    for payload in sse.feed(raw):
                        yield payload
                        if payload is None:
                            await _drain(resp)
                            return
                for payload in sse.close():
                    yield payload
                if sse.events == 0:
                    raise LlmProtocolError("the event stream held no data events")
        except CloudLlmError as exc:
            exc.args = (redact(str(exc), self._key),)
            raise
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise LlmTimeout(self._say("no data within the time limit", exc)) from None
        except aiohttp.ClientConnectorError as exc:
            raise LlmUnreachable(self._say("cannot connect", exc)) from None
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            raise LlmConnectionError(self._say("connection broken", exc)) from None
        except ValueError as exc:  # aiohttp: a line longer than its buffer
            raise LlmProtocolError(self._say("unreadable stream", exc)) from None
        except aiohttp.ClientError as exc:
            raise LlmConnectionError(self._say("HTTP client error", exc)) from None

    def _say(self, what: str, exc: BaseException) -> str:
        return redact(f"{what} ({self.server_address}): {type(exc).__name__}: {exc}", self._key)

    async def _http_error(self, resp: aiohttp.ClientResponse) -> LlmHttpError:
        try:
            text = (await resp.read())[:400].decode("utf-8", "replace")
        except (TimeoutError, aiohttp.ClientError):
            text = ""
        message = redact(f"HTTP {resp.status} from {self.server_address}: {text.strip()}", self._key)
        retry_after = _seconds(resp.headers.get("Retry-After"))
        if resp.status == 429:
            return RateLimited(resp.status, message, retry_after)
        if resp.status in (401, 403):
            return LlmAuthError(resp.status, message)
        return LlmHttpError(resp.status, message, retry_after)


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


async def _drain(resp: aiohttp.ClientResponse) -> None:
    """Read to the end after ``[DONE]`` so the connection goes back to the pool; give up quickly."""
    try:
        await asyncio.wait_for(resp.content.read(), timeout=0.5)
    except (TimeoutError, aiohttp.ClientError):
        resp.close()
