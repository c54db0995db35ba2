"""The fault proxy passes requests until told to fail them, then fails each new one as asked (a 503 with
OpenAI's error body, a reset, a stall), and passes again when told: one request per connection, so a client
that keeps connections alive meets the change at its next request."""

from __future__ import annotations

import http.client
import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from pipeline.interop.fault_proxy import FaultProxy, _with_close


class _Echo(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        answer = json.dumps({"got": len(body), "connection": self.headers["Connection"]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=upstream.serve_forever, daemon=True)
    thread.start()
    try:
        with FaultProxy(upstream.server_address[1]) as running:
            yield running
    finally:
        upstream.shutdown()
        upstream.server_close()


def post(proxy: FaultProxy, timeout_s: float = 5.0) -> tuple[int, dict[str, object]]:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=timeout_s)
    try:
        connection.request("POST", "/v1/chat/completions", body=b"x" * 70_000, headers={"Connection": "keep-alive"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_a_request_passes_with_its_connection_closed_after_it(proxy: FaultProxy) -> None:
    assert post(proxy) == (200, {"got": 70_000, "connection": "close"})


def test_each_fault_then_passing_again(proxy: FaultProxy) -> None:
    proxy.mode = "503"
    status, body = post(proxy)
    assert status == 503 and body["error"] == {
        "message": "The server is overloaded.",
        "type": "server_error",
        "param": None,
        "code": None,
    }
    proxy.mode = "reset"
    with pytest.raises(ConnectionResetError):
        post(proxy)
    proxy.mode = "stall"
    with pytest.raises(TimeoutError):
        post(proxy, timeout_s=0.5)
    proxy.mode = "pass"
    assert post(proxy)[0] == 200
    assert proxy.seen == {"503": 1, "reset": 1, "stall": 1, "pass": 1}


def test_the_head_keeps_every_header_but_connection() -> None:
    head = b"POST /v1 HTTP/1.1\r\nHost: a\r\nconnection: keep-alive\r\nContent-Length: 2\r\n\r\n"
    assert _with_close(head) == b"POST /v1 HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nConnection: close\r\n\r\n"
