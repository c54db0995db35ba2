"""What the lab sends for MCP and OTA, byte for byte as before they were typed (wire/mcp.py, wire/ota.py).

The expected JSON was captured from the dict-building code before the change: key names, which keys
are present, value types and key order are what the real firmware and xiaozhi-esp32-server see."""

# ruff: noqa: E501 (the expected JSON, each message on one line as it goes on the wire)

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from pipeline.transport.device.tools import EmulatedTools
from pipeline.transport.server.device_tools import DeviceToolsClient
from pipeline.transport.server.ota_endpoint import OtaServer, OtaSettings
from pipeline.transport.wire import mcp, mqtt_identity, ota
from pipeline.transport.wire.messages import Mcp, encode

EXPECTED = {
    "initialize": '{"type":"mcp","payload":{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{"roots":{"listChanged":true},"sampling":{},"vision":{"url":"http://127.0.0.1/mcp/vision/explain","token":"lab"}},"clientInfo":{"name":"xiaozhi-lab","version":"1.0.0"}}},"session_id":"s-1"}',
    "list_first": '{"type":"mcp","payload":{"jsonrpc":"2.0","id":2,"method":"tools/list"},"session_id":"s-1"}',
    "list_cursor": '{"type":"mcp","payload":{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":"self.b"}},"session_id":"s-1"}',
    "call": '{"type":"mcp","payload":{"jsonrpc":"2.0","id":10000,"method":"tools/call","params":{"name":"self.light.set_light","arguments":{"room":"厨房","on":true,"n":null}}},"session_id":"s-1"}',
    "init_result": '{"type":"mcp","payload":{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2024-11-05","capabilities":{"tools":{}},"serverInfo":{"name":"voice-latency-lab-emulator","version":"1.0.0"}}},"session_id":"s-1"}',
    "list_result": '{"type":"mcp","payload":{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"self.get_device_status","description":"Provides the real-time information of the device, including the current status of the audio speaker, screen, battery, network, etc.\\nUse this tool for: \\n1. Answering questions about current condition (e.g. what is the current volume of the audio speaker?)\\n2. As the first step to control the device (e.g. turn up / down the volume of the audio speaker, etc.)","inputSchema":{"type":"object","properties":{}}},{"name":"self.audio_speaker.set_volume","description":"Set the volume of the audio speaker. If the current volume is unknown, you must call `self.get_device_status` tool first and then call this tool.","inputSchema":{"type":"object","properties":{"volume":{"type":"integer","minimum":0,"maximum":100}},"required":["volume"]}},{"name":"self.light.set_light","description":"Turn the light in a room on or off.","inputSchema":{"type":"object","properties":{"room":{"type":"string"},"on":{"type":"boolean"}},"required":["room","on"]}}]}},"session_id":"s-1"}',
    "list_result_cursor": '{"type":"mcp","payload":{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"self.light.set_light","description":"Turn the light in a room on or off.","inputSchema":{"type":"object","properties":{"room":{"type":"string"},"on":{"type":"boolean"}},"required":["room","on"]}}]}},"session_id":"s-1"}',
    "call_result": '{"type":"mcp","payload":{"jsonrpc":"2.0","id":10000,"result":{"content":[{"type":"text","text":"true"}],"isError":false}},"session_id":"s-1"}',
    "status_result": '{"type":"mcp","payload":{"jsonrpc":"2.0","id":10001,"result":{"content":[{"type":"text","text":"{\\"audio_speaker\\":{\\"volume\\":70},\\"screen\\":{},\\"network\\":{\\"type\\":\\"wifi\\",\\"ssid\\":\\"lab\\",\\"signal\\":\\"strong\\"},\\"lights\\":{\\"hall\\":true}}"}],"isError":false}},"session_id":"s-1"}',
    "error_result": '{"type":"mcp","payload":{"jsonrpc":"2.0","id":10002,"error":{"message":"Value exceeds maximum allowed: 100"}},"session_id":"s-1"}',
    "not_implemented": '{"type":"mcp","payload":{"jsonrpc":"2.0","id":7,"error":{"message":"Method not implemented: ping"}},"session_id":"s-1"}',
    "ota_websocket": '{"server_time":{"timestamp":1700000000123,"timezone_offset":480},"firmware":{"version":"1.6.0","url":""},"websocket":{"url":"ws://127.0.0.1:8000/xiaozhi/v1/","token":"tok"}}',
    "ota_mqtt": '{"server_time":{"timestamp":1700000000123,"timezone_offset":0},"firmware":{"version":"1.6.0","url":""},"mqtt":{"endpoint":"127.0.0.1:1883","port":1883,"client_id":"GID_test@@@aa_bb_cc_dd_ee_ff@@@uuid-1","username":"eyJpcCI6IjEyNy4wLjAuMSJ9","password":"cbJCrHhPvoRXkVxAGBpMo7EnjEsMpL2P+aRSqMka3Ic=","publish_topic":"device-server","subscribe_topic":"null"}}',
    "ota_refusal": '{"success":false,"message":"bad"}',
}


class _Clock:
    def now_ns(self) -> int:
        return 1_700_000_000_123_456_789


def _server_sends() -> list[str]:
    sent: list[str] = []

    async def send(message: Mcp) -> None:
        sent.append(encode(message))

    async def scenario() -> None:
        client = DeviceToolsClient(send, "s-1")
        await client.start()
        await client._list()
        await client._list("self.b")
        args = {"room": "厨房", "on": True, "n": None}
        call = asyncio.ensure_future(client._call(10000, "self.light.set_light", args))
        await asyncio.sleep(0)
        call.cancel()

    asyncio.run(scenario())
    return sent


def test_the_servers_mcp_requests_are_todays_bytes() -> None:
    assert _server_sends() == [EXPECTED[k] for k in ("initialize", "list_first", "list_cursor", "call")]


REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("init_result", {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
    ("list_result", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    ("list_result_cursor", {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"cursor": "self.light.set_light"}}),
    ("call_result", {"jsonrpc": "2.0", "id": 10000, "method": "tools/call", "params": {"name": "self.light.set_light", "arguments": {"room": "hall", "on": True}}}),
    ("status_result", {"jsonrpc": "2.0", "id": 10001, "method": "tools/call", "params": {"name": "self.get_device_status", "arguments": {}}}),
    ("error_result", {"jsonrpc": "2.0", "id": 10002, "method": "tools/call", "params": {"name": "self.audio_speaker.set_volume", "arguments": {"volume": 300}}}),
    ("not_implemented", {"jsonrpc": "2.0", "id": 7, "method": "ping"}),
]  # fmt: skip


def test_the_devices_mcp_answers_are_todays_bytes() -> None:
    tools = EmulatedTools()  # one device: the status call shows the light the call before set
    for key, request in REQUESTS:
        answer = tools.handle(mcp.read(json.dumps(request)))
        assert answer is not None
        assert encode(Mcp(payload=answer, session_id="s-1")) == EXPECTED[key], key


@pytest.mark.parametrize("with_mqtt", [False, True])
def test_the_ota_answer_is_todays_bytes_with_and_without_mqtt(with_mqtt: bool) -> None:
    if with_mqtt:
        server = OtaServer(OtaSettings("ws://x/", mqtt_endpoint="127.0.0.1:1883"), _Clock())  # type: ignore[arg-type]
        user = {"ip": "127.0.0.1"}
        config = mqtt_identity.device_config("127.0.0.1:1883", "aa:bb:cc:dd:ee:ff", "uuid-1", "key", user_data=user)
        response = server._answer("1.6.0", config.section(1883))
    else:
        settings = OtaSettings("ws://127.0.0.1:8000/xiaozhi/v1/", token="tok", timezone_offset_min=480)
        response = OtaServer(settings, _Clock())._answer("1.6.0")  # type: ignore[arg-type]
    expected = EXPECTED["ota_mqtt" if with_mqtt else "ota_websocket"]
    assert isinstance(response.body, bytes) and response.body.decode() == expected
    assert response.content_type == "application/json" and response.charset == "utf-8"
    answer = ota.read_answer(expected)  # and the device reads it back to the same sections
    assert isinstance(answer.mqtt, ota.MqttSection) is with_mqtt
    assert isinstance(answer.websocket, ota.WebsocketSection) is not with_mqtt


def test_the_ota_refusal_and_the_devices_request_keep_their_keys() -> None:
    response = OtaServer(OtaSettings("ws://x/"), _Clock())._refusal("bad")  # type: ignore[arg-type]
    assert isinstance(response.body, bytes) and response.body.decode() == EXPECTED["ota_refusal"]
    request = ota.OtaRequest(application=ota.Application(name="xiaozhi", version="1.6.0"), mac_address="m", uuid="u")
    # what aiohttp's json= wrote before: the same keys and values
    assert json.loads(ota.encode(request)) == {
        "application": {"name": "xiaozhi", "version": "1.6.0"},
        "mac_address": "m",
        "uuid": "u",
    }
