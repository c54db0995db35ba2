"""A cloud LLM: an OpenAI-compatible streaming chat client (condition A, METHOD M13).

Works with any ``/chat/completions`` endpoint that streams Server-Sent Events:
OpenAI, DashScope's compatible mode, DeepSeek, vLLM, a llama.cpp server, the lab's
emulated cloud. The base URL, model and the *name* of the API-key variable are
settings; the key's value is handed in by the entry point and never appears in a
message, a trace or a repr.

What the pipeline sees, so that the single timing wrapper can time it:
- the first SSE chunk (often a role-only delta) as an empty ``Delta``: the recorder
  stamps it but does not count it as the first token;
- every non-empty content delta as a ``Delta`` the moment its line is parsed: the
  first one is the first token;
- a tool call as one ``ToolCallChunk`` once its streamed arguments are complete;
- ``Done`` with the finish reason, usage, the server's own timings when it sends them
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
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
from yarl import URL

from stages.llm import ChatRequest, Chunk, Delta, Done, LlmError, Message, ToolCallChunk

SENTENCE_STOPS = ("。", "！", "？", "；", ". ", "! ", "? ")
SENTENCE_ENDS = "。！？；….!?;"
SERVER_TIMINGS = ("queue_ms", "prompt_ms", "predicted_ms", "cache_n", "prompt_n", "predicted_n")
Continuation = Literal["plain", "partial", "prefix", "vllm"]
CONTINUATIONS: tuple[Continuation, ...] = ("plain", "partial", "prefix", "vllm")
RETRY_AFTER_CAP_S = 10.0


class CloudLlmError(LlmError):
    """A call to the cloud endpoint failed; the subclass name is the row's error class."""

    attempts: int = 1


class LlmMissingApiKey(CloudLlmError):
    """The configured API-key variable is not set."""


class LlmHttpError(CloudLlmError):
    """The endpoint answered with an HTTP error status."""

    def __init__(self, status: int, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


class RateLimited(LlmHttpError):
    """HTTP 429."""


class LlmAuthError(LlmHttpError):
    """HTTP 401 or 403: a wrong or missing key."""


class LlmTimeout(CloudLlmError):
    """Connecting, or waiting for the next byte, took longer than its limit."""


class LlmUnreachable(CloudLlmError):
    """No connection could be made (refused, no route, name not resolved)."""


class LlmConnectionError(CloudLlmError):
    """An established connection broke (reset or closed mid-stream)."""


class LlmProtocolError(CloudLlmError):
    """The response is not an OpenAI-compatible event stream (malformed SSE or JSON)."""


class LlmServerError(CloudLlmError):
    """The server reported an error inside the stream."""


def retryable(exc: CloudLlmError) -> bool:
    """Failures worth another attempt: overload, server errors and network trouble."""
    if isinstance(exc, LlmHttpError):
        return isinstance(exc, RateLimited) or exc.status >= 500
    return isinstance(exc, (LlmTimeout, LlmUnreachable, LlmConnectionError))


@dataclass(frozen=True, slots=True)
class OpenAISettings:
    base_url: str  # up to and including the version, e.g. https://api.deepseek.com/v1
    model: str
    api_key_env: str = ""  # name of the variable holding the key ("" = the endpoint needs none)
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 30.0  # longest silence allowed: before the headers and between chunks
    retries: int = 0  # extra attempts on 429, 5xx, timeouts and broken connections, before any output
    retry_backoff_ms: float = 500.0  # doubled per retry; a Retry-After header (capped at 10 s) wins
    temperature: float | None = 0.0
    seed: int | None = None
    stream_usage: bool = True  # stream_options.include_usage
    sentence_stops: tuple[str, ...] = SENTENCE_STOPS  # OpenAI itself accepts at most 4
    continuation: Continuation = "plain"  # how a trailing assistant message is marked for continuation
    keepalive_s: float = 60.0  # 0 = a new connection for every call

    def __post_init__(self) -> None:
        url = URL(self.base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base_url {self.base_url!r}: expected http(s)://host[:port]/path")
        if not self.model:
            raise ValueError("model must be given")
        if self.retries < 0 or self.retry_backoff_ms < 0 or self.keepalive_s < 0:
            raise ValueError("retries, retry_backoff_ms and keepalive_s must be >= 0")
        if self.connect_timeout_s <= 0 or self.read_timeout_s <= 0:
            raise ValueError("connect_timeout_s and read_timeout_s must be positive")
        if self.continuation not in CONTINUATIONS:
            raise ValueError(f"continuation {self.continuation!r}: choose one of {', '.join(CONTINUATIONS)}")


# --- request --------------------------------------------------------------------------------


def openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Our messages in the OpenAI chat format; tool calls get ids and their results refer to them."""
    out: list[dict[str, Any]] = []
    call_id = ""
    for m in messages:
        if m.role == "assistant" and m.tool_name:
            call_id = f"call_{len(out)}"
            function = {"name": m.tool_name, "arguments": m.tool_arguments or "{}"}
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": call_id, "type": "function", "function": function}],
                }
            )
        elif m.role == "tool":
            out.append({"role": "tool", "tool_call_id": call_id or "call_0", "content": m.content})
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def request_body(settings: OpenAISettings, request: ChatRequest) -> dict[str, Any]:
    messages = openai_messages(request.messages)
    body: dict[str, Any] = {"model": settings.model, "stream": True, "max_tokens": request.max_tokens}
    if settings.stream_usage:
        body["stream_options"] = {"include_usage": True}
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    if settings.seed is not None:
        body["seed"] = settings.seed
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": json.loads(t.parameters_json)},
            }
            for t in request.tools
        ]
    if request.stop_at_sentence and settings.sentence_stops:
        body["stop"] = list(settings.sentence_stops)
    if request.assistant_prefix:
        prefix: dict[str, Any] = {"role": "assistant", "content": request.assistant_prefix}
        if settings.continuation == "partial":  # DashScope
            prefix["partial"] = True
        elif settings.continuation == "prefix":  # DeepSeek (beta)
            prefix["prefix"] = True
        elif settings.continuation == "vllm":
            body["continue_final_message"], body["add_generation_prompt"] = True, False
        messages.append(prefix)
    body["messages"] = messages
    return body


# --- response -------------------------------------------------------------------------------


def redact(text: str, secret: str | None) -> str:
    """The text with the secret blanked out, and its first and last 8 characters (as providers echo them)."""
    if not secret:
        return text
    text = text.replace(secret, "***")
    if len(secret) >= 16:
        for piece in {secret[:8], secret[-8:]}:
            text = text.replace(piece, "***")
    return text


class SseLines:
    """Server-Sent Events to JSON payloads, one per complete ``data`` field.

    A payload is handed on as soon as its data parses, without waiting for the blank
    line that ends the event; multi-line data is joined as the SSE standard says.
    ``None`` stands for ``data: [DONE]``. Comments and other fields are ignored.
    """

    def __init__(self) -> None:
        self.pending: list[str] = []
        self.events = 0

    def feed(self, raw: bytes) -> list[dict[str, Any] | None]:
        try:
            line = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            raise LlmProtocolError(f"stream is not UTF-8 text: {raw[:60]!r}") from None
        if not line:
            return self._end_of_event()
        if line.startswith(":") or not line.startswith("data:"):
            return []
        data = line[5:].removeprefix(" ")
        if not self.pending and data.strip() == "[DONE]":
            self.events += 1
            return [None]
        self.pending.append(data)
        return self._parsed(strict=False)

    def close(self) -> list[dict[str, Any] | None]:
        return self._end_of_event()

    def _end_of_event(self) -> list[dict[str, Any] | None]:
        return self._parsed(strict=True) if self.pending else []

    def _parsed(self, strict: bool) -> list[dict[str, Any] | None]:
        text = "\n".join(self.pending)
        try:
            payload = json.loads(text)
        except ValueError:
            if strict:
                raise LlmProtocolError(f"malformed JSON in the event stream: {text[:120]!r}") from None
            return []
        self.pending = []
        if not isinstance(payload, dict):
            raise LlmProtocolError(f"event data is not a JSON object: {text[:120]!r}")
        self.events += 1
        return [payload]


@dataclass(slots=True)
class _ToolParts:
    name: str = ""
    arguments: str = ""


@dataclass(slots=True)
class StreamShaper:
    """Turns chunk payloads of one attempt into Deltas, a tool call and the final Done."""

    request: ChatRequest
    text: str = ""
    chunks: int = 0
    deltas: int = 0
    finish_reason: str = ""
    stop_reason: str | None = None
    stop_reason_known: bool = False
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    tools: dict[int, _ToolParts] = field(default_factory=dict)
    finished: bool = False  # [DONE] seen

    @property
    def produced(self) -> bool:
        """Whether any text has been handed on (the empty first-chunk delta does not count)."""
        return self.deltas > 0

    def feed(self, payload: dict[str, Any] | None) -> list[Chunk]:
        if payload is None:
            self.finished = True
            return []
        if "error" in payload:
            raise LlmServerError(f"server error in stream: {json.dumps(payload['error'])[:300]}")
        self._side_info(payload)
        out: list[Chunk] = []
        choices = payload.get("choices")
        if not isinstance(choices, list):
            raise LlmProtocolError(f"chunk without a 'choices' list: {json.dumps(payload)[:120]}")
        choice = next((c for c in choices if isinstance(c, dict) and c.get("index", 0) == 0), None)
        if choice is not None:
            out += self._choice(choice)
        if self.chunks == 0 and not out:
            out.append(Delta(""))  # the first chunk: stamped, but not a token
        self.chunks += 1
        return out

    def _side_info(self, payload: dict[str, Any]) -> None:
        if isinstance(payload.get("usage"), dict):
            self.usage = payload["usage"]
        timings = payload.get("timings")
        if isinstance(timings, dict):
            self.timings = {k: float(v) for k, v in timings.items() if k in SERVER_TIMINGS and _number(v)}

    def _choice(self, choice: dict[str, Any]) -> list[Chunk]:
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise LlmProtocolError(f"'delta' is not an object: {delta!r:.120}")
        out: list[Chunk] = []
        content = delta.get("content")
        if isinstance(content, str) and content:
            self.text += content
            self.deltas += 1
            out.append(Delta(content))
        for call in delta.get("tool_calls") or []:
            self._tool_part(call)
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
            if "stop_reason" in choice:  # vLLM and the emulated cloud name the stop sequence hit
                self.stop_reason_known = True
                reason = choice["stop_reason"]
                self.stop_reason = reason if isinstance(reason, str) else None
        return out

    def _tool_part(self, call: Any) -> None:
        if not isinstance(call, dict):
            raise LlmProtocolError(f"malformed tool call delta: {call!r:.120}")
        parts = self.tools.setdefault(int(call.get("index", 0)), _ToolParts())
        function = call.get("function") or {}
        parts.name += str(function.get("name") or "")
        parts.arguments += str(function.get("arguments") or "")

    def finish(self, attempts: int) -> list[Chunk]:
        """The call's last chunks: a stop sequence put back, a tool call, then Done."""
        if not self.finish_reason and not self.finished:
            raise LlmConnectionError("the stream ended before the answer finished (no finish_reason, no [DONE])")
        out: list[Chunk] = []
        finish = self.finish_reason or "stop"
        complete = finish != "length"
        if self.tools:
            first = self.tools[min(self.tools)]  # the stage runs one tool per call
            if not first.name:
                raise LlmProtocolError("a tool call without a function name")
            out.append(ToolCallChunk(first.name, first.arguments or "{}"))
            finish = "tool_calls"
        elif self.request.stop_at_sentence and finish == "stop":
            hit, ending = self._stop_hit()
            if ending:
                out.append(Delta(ending))
            complete = not hit
        output_tokens = _int(self.usage.get("completion_tokens"), self.deltas)
        timings = [(k, self.timings[k]) for k in SERVER_TIMINGS if k in self.timings]
        timings.append(("attempts", float(attempts)))
        out.append(
            Done(
                finish,
                output_tokens=output_tokens,
                input_tokens=_int(self.usage.get("prompt_tokens"), 0),
                answer_complete=complete,
                server_timings=tuple(timings),
            )
        )
        return out

    def _stop_hit(self) -> tuple[bool, str]:
        """Whether a stop sequence ended this call, and the punctuation to put back.

        Servers leave the matched stop sequence out of the text. vLLM and the emulated cloud
        name it (``stop_reason``); for the others it is inferred: a sentence that ends without
        its closing punctuation was cut there, and gets the likely one back. Only the visible
        part comes back (". " gives "."), so the next call continues with its own leading space.
        """
        if not self.text.strip():
            return False, ""
        if self.stop_reason_known:
            return self.stop_reason is not None, (self.stop_reason or "").strip()
        if self.text.rstrip()[-1] in SENTENCE_ENDS:
            return False, ""
        return True, "。" if re.search(r"[\u3400-\u9fff]", self.text[-4:]) else "."


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int(value: Any, default: int) -> int:
    return int(value) if _number(value) else default


# --- the backend ----------------------------------------------------------------------------


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
        return f"OpenAIChatBackend(model={self.model!r}, url={self._url!r})"

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
