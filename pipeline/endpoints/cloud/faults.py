"""Faults the emulated cloud can serve, for tests: errors, broken streams, cut connections, stalls.

A request asks for one with the ``X-Emulator-Fault`` header only where the emulator was started to
take it (``allow_fault_header``; off by default): otherwise any caller could make it fail.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

FAULTS = ("", "garbage", "not-sse", "429", "500", "drop", "stall")
FAULT_HEADER = "X-Emulator-Fault"


def error(
    status: int,
    message: str,
    kind: str,
    code: str | None = None,
    retry_after_s: int | None = None,
    param: str | None = None,
) -> web.Response:
    """An error as OpenAI's API answers one: ``{"error": {message, type, param, code}}``."""
    headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None else None
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status, headers=headers)


def cut(request: web.Request) -> None:
    """Drop the connection mid-stream, as a crashed server or a broken middlebox would."""
    if request.transport is not None:
        request.transport.abort()


async def broken(request: web.Request, fault: str) -> web.StreamResponse:
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
