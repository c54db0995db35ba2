"""Traces from Jaeger's stable query API, ``GET /api/v3/traces`` (OTLP JSON), as a ``Dataset``.

The answer is one or more ``{"result": TracesData}`` documents (grpc-gateway streams them
back to back); "no traces found" comes as an ``{"error": ...}`` document with HTTP 404.
Jaeger may write ids as base64 (protobuf's JSON mapping) or hex (OTLP JSON), and enums as
names (``STATUS_CODE_ERROR``) or numbers: all are normalised to the Collector file format
before ``pipeline.analysis.traces`` reads them, so the rows are the same as from a trace file.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pipeline.analysis.traces import ReadProblems, ReadSpan, spans_from_traces_data
from pipeline.report.load import Dataset, LoadError, dataset_from_spans
from pipeline.tracing import names

_ID_LENGTHS = {"traceId": 16, "spanId": 8, "parentSpanId": 8}
_STATUS = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": names.STATUS_ERROR}

Fetch = Callable[[str, float], bytes]


@dataclass(frozen=True, slots=True)
class JaegerQuery:
    """A search of Jaeger's query API for one service's traces in a time window."""

    base_url: str  # e.g. http://localhost:16686
    service: str
    start: datetime  # timezone-aware
    end: datetime
    search_depth: int = 1000  # traces at most; one replay run is one trace
    timeout_s: float = 30.0

    def url(self) -> str:
        params = {
            "query.serviceName": self.service,
            "query.startTimeMin": rfc3339(self.start),
            "query.startTimeMax": rfc3339(self.end),
            "query.searchDepth": str(self.search_depth),
        }
        return f"{self.base_url.rstrip('/')}/api/v3/traces?{urllib.parse.urlencode(params)}"


def rfc3339(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("Jaeger query times must carry a time zone")
    return moment.isoformat().replace("+00:00", "Z")


def normal_id(value: str, key: str) -> str:
    """A span or trace id as lowercase hex, from hex or base64."""
    size = _ID_LENGTHS[key]
    if not value:
        return ""
    if len(value) == 2 * size and all(c in "0123456789abcdefABCDEF" for c in value):
        return value.lower()
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{key} {value!r} is neither hex nor base64") from None
    if len(raw) != size:
        raise ValueError(f"{key} {value!r} decodes to {len(raw)} bytes, not {size}")
    return raw.hex()


def _normal_span(span: dict[str, Any]) -> None:
    for key in _ID_LENGTHS:
        if key in span:
            span[key] = normal_id(str(span[key]), key)
    status = span.get("status")
    if isinstance(status, dict) and isinstance(status.get("code"), str):
        code = status["code"]
        status["code"] = _STATUS.get(code, int(code) if code.isdigit() else 0)


def normalise(data: dict[str, Any]) -> dict[str, Any]:
    """A Jaeger ``TracesData`` made to look like a Collector file line (in place; returned)."""
    for resource_spans in data.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                _normal_span(span)
    return data


def documents(body: str) -> Iterator[dict[str, Any]]:
    """The JSON documents of a streamed answer, one after another."""
    decoder = json.JSONDecoder(parse_constant=_no_constants)
    pos = 0
    while True:
        while pos < len(body) and body[pos].isspace():
            pos += 1
        if pos >= len(body):
            return
        doc, pos = decoder.raw_decode(body, pos)
        if not isinstance(doc, dict):
            raise ValueError(f"expected a JSON object, got {type(doc).__name__}")
        yield doc


def spans_from_answer(body: str, problems: ReadProblems) -> list[ReadSpan]:
    """Spans of every ``result`` document; ``error`` documents go to ``problems``."""
    spans: list[ReadSpan] = []
    try:
        for number, doc in enumerate(documents(body), start=1):
            if "error" in doc:
                problems.add(f"Jaeger answered: {_error_text(doc['error'])}")
                continue
            try:
                spans.extend(spans_from_traces_data(normalise(doc.get("result", doc))))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                problems.add(f"Jaeger answer document {number}: unreadable ({type(exc).__name__}: {exc})")
    except ValueError as exc:
        problems.add(f"Jaeger answer is not JSON after {len(spans)} span(s): {exc}")
    return spans


def _error_text(error: object) -> str:
    if isinstance(error, dict):
        return f"{error.get('httpCode', error.get('code', '?'))} {error.get('message', '')}".strip()
    return str(error)


def _no_constants(name: str) -> float:
    raise ValueError(f"{name} is not a number a trace may hold")


MAX_ANSWER_BYTES = 1 << 30  # 1 GiB: far beyond any search depth here, short of filling the memory


def _read_limited(answer: Any, url: str, limit: int) -> bytes:
    """The whole body, in pieces, refusing one over ``limit`` and one that breaks off before its length."""
    chunks: list[bytes] = []
    total = 0
    try:
        while chunk := answer.read(1 << 20):
            total += len(chunk)
            if total > limit:
                raise LoadError(f"{url}: Jaeger's answer is larger than {limit} bytes; narrow --start/--end")
            chunks.append(chunk)
    except http.client.IncompleteRead:
        raise LoadError(f"{url}: Jaeger's answer broke off after {total} bytes") from None
    declared = (answer.headers or {}).get("Content-Length")
    if declared is not None and declared.isdigit() and total < int(declared):
        raise LoadError(f"{url}: Jaeger's answer broke off after {total} of {declared} bytes")
    return b"".join(chunks)


def http_get(url: str, timeout_s: float, limit: int = MAX_ANSWER_BYTES) -> bytes:
    """GET ``url``; an HTTP error status still returns its body (Jaeger's 404 means "no traces")."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return _read_limited(answer, url, limit)
    except urllib.error.HTTPError as exc:
        body = _read_limited(exc, url, limit)
        if body:
            return body
        raise LoadError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise LoadError(f"{url}: cannot reach Jaeger ({exc})") from None


def load_jaeger(query: JaegerQuery, runs: tuple[str, ...] = (), fetch: Fetch = http_get) -> Dataset:
    url = query.url()
    body = fetch(url, query.timeout_s).decode("utf-8", errors="replace")
    problems = ReadProblems()
    spans = spans_from_answer(body, problems)
    source = f"Jaeger {query.base_url} service {query.service!r}, {rfc3339(query.start)} to {rfc3339(query.end)}"
    data = dataset_from_spans(spans, problems, source, runs)
    data.files = [url]
    return data
