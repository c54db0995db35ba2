"""A stand-in for Jaeger's query service: serves recorded ``/api/v3/traces`` answers on 127.0.0.1.

It honours what the report sends: ``query.serviceName`` (required, matched against the
resource's ``service.name``), ``query.startTimeMin`` / ``query.startTimeMax`` (RFC 3339,
matched against each trace's earliest span start) and ``query.searchDepth``; the
snake_case spellings Jaeger also accepts work too. Like Jaeger it answers 404 with an
``error`` document when nothing matches, and 400 for a bad query. Spans are served in the
ids and enum spellings they were recorded with (base64 or hex).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

Span = dict[str, Any]


def _arg(query: dict[str, list[str]], camel: str, snake: str) -> str:
    return (query.get(camel) or query.get(snake) or [""])[0]


def _ns(text: str) -> int:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


class Store:
    """Recorded answers, flattened to (service, trace id, resource, scope, span) records."""

    def __init__(self, answers: list[str]) -> None:
        self.records: list[tuple[str, str, dict[str, Any], dict[str, Any], Span]] = []
        self.requests: list[str] = []
        decoder = json.JSONDecoder()
        for body in answers:
            pos = 0
            while pos < len(body.rstrip()):
                while body[pos].isspace():
                    pos += 1
                doc, pos = decoder.raw_decode(body, pos)
                self._add(doc.get("result", doc))

    def _add(self, data: dict[str, Any]) -> None:
        for rs in data.get("resourceSpans", []):
            resource = rs.get("resource", {})
            service = next(
                (
                    a["value"].get("stringValue", "")
                    for a in resource.get("attributes", [])
                    if a["key"] == "service.name"
                ),
                "",
            )
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    self.records.append((service, span["traceId"], resource, ss.get("scope", {}), span))

    def find(self, service: str, start_min: int, start_max: int, depth: int) -> list[dict[str, Any]]:
        """One TracesData per matching trace, like Jaeger's stream."""
        starts: dict[str, int] = {}
        for svc, trace, _res, _scope, span in self.records:
            if svc == service:
                starts[trace] = min(starts.get(trace, 1 << 63), int(span["startTimeUnixNano"]))
        chosen = [t for t, s in sorted(starts.items(), key=lambda kv: kv[1]) if start_min <= s <= start_max][:depth]
        out = []
        for trace in chosen:
            records = [r for r in self.records if r[1] == trace and r[0] == service]
            out.append(
                {
                    "resourceSpans": [
                        {
                            "resource": records[0][2],
                            "scopeSpans": [{"scope": records[0][3], "spans": [r[4] for r in records]}],
                        }
                    ]
                }
            )
        return out


class Handler(BaseHTTPRequestHandler):
    store: Store

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, code: int, body: str) -> None:
        data = body.encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, code: int, message: str) -> None:
        self._send(code, json.dumps({"error": {"httpCode": code, "message": message}}))

    def do_GET(self) -> None:
        url = urlparse(self.path)
        self.store.requests.append(self.path)
        if url.path != "/api/v3/traces":
            self._error(404, f"no route {url.path}")
            return
        q = parse_qs(url.query)
        service = _arg(q, "query.serviceName", "query.service_name")
        if not service:
            self._error(400, "query.serviceName is required")
            return
        try:
            low = _ns(_arg(q, "query.startTimeMin", "query.start_time_min") or "1970-01-01T00:00:00Z")
            high = _ns(_arg(q, "query.startTimeMax", "query.start_time_max") or "2100-01-01T00:00:00Z")
            depth = int(_arg(q, "query.searchDepth", "query.search_depth") or "100")
        except ValueError as exc:
            self._error(400, f"bad query: {exc}")
            return
        found = self.store.find(service, low, high, depth)
        if not found:
            self._error(404, "No traces found")
            return
        self._send(200, "\n".join(json.dumps({"result": t}) for t in found) + "\n")


@contextmanager
def serve(answers: list[str]) -> Iterator[tuple[str, Store]]:
    """``with serve([...]) as (base_url, store):`` a fake Jaeger on a random local port."""
    store = Store(answers)
    handler = type("BoundHandler", (Handler,), {"store": store})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", store
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
