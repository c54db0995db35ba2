"""The device's OTA request against a hostile OTA endpoint: a huge answer is refused at the cap without
being read, a deeply nested one before it is decoded, each with a ``DeviceError`` that says so."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web

from pipeline.clock import RealClock
from pipeline.transport.device.device_settings import DownlinkLimits, LinkSettings
from pipeline.transport.device.link import DeviceError
from pipeline.transport.device.mqtt_udp_link import MqttUdpLink
from pipeline.transport.device.ota_client import json_depth
from tests.transport.server.test_websocket import real

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CAP = DownlinkLimits().max_ota_bytes


async def _refusal(handler: Handler) -> str:
    """What the device says when it boots against an OTA endpoint that answers with ``handler``."""
    app = web.Application()
    app.router.add_post("/xiaozhi/ota/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    link = MqttUdpLink(LinkSettings(f"http://127.0.0.1:{port}/xiaozhi/ota/", connect_timeout_s=5), RealClock())
    try:
        await link.open()
    except DeviceError as exc:
        return str(exc)
    finally:
        await link.close()
        await runner.cleanup()
    return "connected"


def _padded(size: int) -> bytes:
    """A well-formed answer with an mqtt section, padded with a field the device ignores to ``size`` bytes."""
    mqtt = {"endpoint": "127.0.0.1:1", "client_id": "GID@@@02_00_00_00_00_01@@@x"}
    head = json.dumps({"mqtt": mqtt, "pad": ""}).encode()
    return head[:-2] + b"x" * (size - len(head)) + head[-2:]


@pytest.mark.parametrize("length", ["announced", "chunked"])
def test_an_answer_longer_than_the_cap_is_refused_at_the_cap(length: str) -> None:
    async def answer(request: web.Request) -> web.StreamResponse:
        body = _padded(CAP + 1)
        if length == "announced":
            return web.Response(body=body, content_type="application/json")
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(body), 4096):
            await response.write(body[start : start + 4096])
        await response.write_eof()
        return response

    said = real(lambda: _refusal(answer))
    assert said.endswith(f"the OTA's answer is longer than {CAP} bytes"), said


def test_a_deeply_nested_answer_is_refused_before_it_is_decoded() -> None:
    depth = 5000  # 25 KB: under the size cap; msgspec would need the stack to skip it

    async def answer(request: web.Request) -> web.Response:
        nested = b'{"x":' + b'{"a":' * depth + b"1" + b"}" * depth + b"}"
        return web.Response(body=nested, content_type="application/json")

    said = real(lambda: _refusal(answer))
    assert said.endswith(f"the OTA's answer nests {depth + 1} deep (more than 32)"), said


def test_an_answer_at_the_cap_is_read() -> None:
    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=_padded(CAP), content_type="application/json")

    said = real(lambda: _refusal(answer))  # the answer reads: the refusal is the MQTT gateway's, which is not there
    assert "no session" in said and "OTA" not in said.split(": ", 1)[1], said


def test_json_depth_counts_arrays_and_objects_and_not_brackets_in_strings() -> None:
    assert json_depth(b"1") == json_depth(b'"[[["') == 0
    assert json_depth(b'{"a": [1, {"b": []}]}') == 4
    assert json_depth(b'{"a": "]]]\\"[[[", "b": [[]]}') == 3  # an escaped quote does not end the string
    assert json_depth(b"[" * 70_000) == 70_000  # malformed: counted all the same, and refused
