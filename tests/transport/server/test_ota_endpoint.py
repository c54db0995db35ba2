"""The lab's front door as real clients knock: the WebSocket handshake (query string, query-parameter
credentials, message size), the addresses ``pipeline.serve`` tells devices, and the OTA endpoint a stock
firmware asks at boot. Loopback only. (The MQTT front end's own tests: tests/transport/server/test_mqtt_front.py.)"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import Server
from websockets.exceptions import InvalidStatus
from websockets.protocol import State

from pipeline import serve
from pipeline.clock import RealClock
from pipeline.run import server_run
from pipeline.run.device_side import Ask
from pipeline.settings.fixtures import Question, QuestionSet
from pipeline.transport.device.device import DeviceSettings, EmulatedDevice
from pipeline.transport.device.websocket_link import WebSocketLink
from pipeline.transport.server.ota_endpoint import OTA_PATH, OtaServer, OtaSettings, server_url
from pipeline.transport.server.websocket import WebSocketSettings, start_websocket_server
from tests.paths import REPO_ROOT
from tests.transport.server.test_websocket import SPEECH_END_MS, ScriptedTurns, clip, gateway, real
from tests.wire_helpers import dump, hello, parse

TOKEN = "s3cret"
NOW_NS = 1_767_225_600_123_456_789


class FixedClock:
    kind = "fixed"

    def now_ns(self) -> int:
        return NOW_NS


async def _hello_over(url: str, **kwargs: Any) -> dict[str, Any]:
    async with connect(url, **kwargs) as ws:
        await ws.send(dump(hello()))
        return parse(await ws.recv())


# --- WebSocket handshake ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "query", ["?from=mqtt_gateway", "?device-id=02:00:00:00:00:07", "?from=mqtt_gateway&x=1", "", "?"]
)
def test_a_path_with_a_query_string_is_the_xiaozhi_endpoint(query: str) -> None:
    async def scenario() -> dict[str, Any]:
        async with gateway(ScriptedTurns()) as url:
            return await _hello_over(url + query)

    answer = real(scenario)
    assert answer["type"] == "hello" and answer["session_id"]


def test_the_path_without_its_trailing_slash_is_accepted_and_another_path_is_not() -> None:
    async def scenario() -> None:
        async with gateway(ScriptedTurns()) as url:
            assert (await _hello_over(url.rstrip("/") + "?from=mqtt_gateway"))["type"] == "hello"
            with pytest.raises(InvalidStatus, match="404"):
                await _hello_over(url.replace("/xiaozhi/v1/", "/xiaozhi/v2/") + "?from=mqtt_gateway")

    real(scenario)


def _open_headers(server: Server) -> dict[str, str]:
    """The headers the one open connection's handler sees (an earlier one may still be winding down)."""
    (ws,) = [c for c in server.connections if c.state is State.OPEN]
    assert ws.request is not None
    return {k: ws.request.headers.get(k, "") for k in ("Device-Id", "Client-Id")}


def test_device_client_and_authorization_query_parameters_stand_in_for_missing_headers() -> None:
    """A browser page cannot set headers: it puts them in the query (xs test page xiaoZhiConnect.js)."""

    async def scenario() -> tuple[list[str], list[str], list[dict[str, str]]]:
        settings = WebSocketSettings(port=0, token=TOKEN)
        seen: list[dict[str, str]] = []
        server = await start_websocket_server(settings, ScriptedTurns(), RealClock())
        async with server:
            base = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/xiaozhi/v1/"
            accepted, refused = [], []
            for query in (
                "?authorization=Bearer%20s3cret&device-id=02:00:00:00:00:09&client-id=web-1",
                "?authorization=Bearer+s3cret&device-id=02:00:00:00:00:09&client-id=web-1",
            ):
                async with connect(base + query) as ws:
                    await ws.send(dump(hello()))
                    accepted.append(parse(await ws.recv())["type"])
                    seen.append(_open_headers(server))
            for query, headers in (
                ("?authorization=Bearer%20wrong&device-id=d", None),  # a wrong token
                ("?authorization=s3cret&device-id=d", None),  # no "Bearer ": the real server refuses it too
                ("?device-id=d", None),  # none at all
                ("?authorization=Bearer%20s3cret", {"Authorization": "Bearer wrong"}),  # a header wins
            ):
                with pytest.raises(InvalidStatus) as status:
                    await _hello_over(base + query, additional_headers=headers)
                refused.append(str(status.value))
        return accepted, refused, seen

    accepted, refused, seen = real(scenario)
    assert accepted == ["hello", "hello"]
    assert seen == [{"Device-Id": "02:00:00:00:00:09", "Client-Id": "web-1"}] * 2
    assert len(refused) == 4 and all("401" in r for r in refused)


def test_headers_win_over_query_parameters() -> None:
    async def scenario() -> dict[str, str]:
        server = await start_websocket_server(WebSocketSettings(port=0, token=TOKEN), ScriptedTurns(), RealClock())
        async with server:
            url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/xiaozhi/v1/?device-id=from-query"
            headers = {"Device-Id": "from-header", "Authorization": f"Bearer {TOKEN}"}
            async with connect(url, additional_headers=headers) as ws:
                await ws.send(dump(hello()))
                await ws.recv()
                return {"Device-Id": _open_headers(server)["Device-Id"]}

    assert real(scenario) == {"Device-Id": "from-header"}


@pytest.mark.transport
def test_a_200_kib_text_message_is_read_and_the_session_goes_on() -> None:
    """An MCP tools/list reply or an old firmware's iot descriptors run to tens or hundreds of KiB."""
    turns = ScriptedTurns()
    descriptors = [{"name": f"thing{i}", "description": "x" * 1000, "properties": {}} for i in range(200)]

    async def scenario() -> bool:
        async with gateway(turns) as url, EmulatedDevice(DeviceSettings(url=url), RealClock()) as device:
            big = {"type": "iot", "session_id": device.session_id, "descriptors": descriptors}
            assert len(dump(big)) > 200 * 1024
            assert isinstance(device.link, WebSocketLink) and device.link.ws is not None
            await device.link.ws.send(dump(big))
            return (await device.turn(Ask(clip(), SPEECH_END_MS, "q", 1, ""))).ok

    assert real(scenario)


# --- serve's addresses ---------------------------------------------------------------------------
# (the MQTT front end's own tests are in tests/transport/server/test_mqtt_front.py)


def test_serve_refuses_at_start_to_advertise_a_wildcard_address(tmp_path: Path, capsys: Any) -> None:
    for argv in (
        ["--host", "0.0.0.0", "--ota-port", "0"],
        ["--host", "::", "--mqtt-port", "0"],
        ["--public-host", "0.0.0.0", "--ota-port", "0"],
    ):
        assert serve.main([*argv, "--out", str(tmp_path)], env={}) == 2
        assert "--public-host" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # refused before anything was loaded or written
    assert serve.public_host("0.0.0.0", "", advertised=False) == "0.0.0.0"  # nothing told: allowed
    assert serve.public_host("0.0.0.0", "192.0.2.7", advertised=True) == "192.0.2.7"
    assert serve.public_host("127.0.0.1", "", advertised=True) == "127.0.0.1"


def test_serve_refuses_at_start_an_oracle_asr_without_reference_texts(tmp_path: Path, capsys: Any) -> None:
    """The oracle ASR says each question's reference text; without fixtures every turn would be empty."""
    simulator = REPO_ROOT / "configs" / "simulator.toml"
    assert serve.main(["--config", str(simulator), "--port", "0", "--out", str(tmp_path)], env={}) == 2
    err = capsys.readouterr().err
    assert "oracle" in err and "fixtures folder" in err
    assert not list(tmp_path.iterdir())  # refused before anything was loaded or written
    untexted = QuestionSet(tmp_path, (Question("q1", "en", "", "", tmp_path / "q1.wav"),))
    with pytest.raises(ValueError, match="has no reference texts"):  # a folder without a manifest
        server_run.refuse_oracle_without_texts("oracle", untexted)
    server_run.refuse_oracle_without_texts("whisper", untexted)  # a real ASR hears the audio itself
    texted = QuestionSet(tmp_path, (Question("q1", "en", "", "What time is it?", tmp_path / "q1.wav"),))
    server_run.refuse_oracle_without_texts("oracle", texted)


def test_serve_accepts_the_udp_public_host_spelling_of_the_flag() -> None:
    args = serve.parse_args(["--udp-public-host", "192.0.2.7", "--ota-port", "8003"])
    assert (args.public_host, args.ota_port) == ("192.0.2.7", 8003)
    assert serve.parse_args([]).ota_port is None  # no OTA endpoint unless asked


# --- OTA endpoint ----------------------------------------------------------------------------

# what xiaozhi-esp32 sends (main/ota.cc SetupHttp, boards/common/board.cc GetSystemInfoJson), abridged
FIRMWARE_HEADERS = {
    "Activation-Version": "1",
    "Device-Id": "02:00:00:00:00:0a",
    "Client-Id": "6f1c1a52-0a5e-4d0e-9b3f-1a2b3c4d5e6f",
    "User-Agent": "bread-compact-wifi/1.6.2",
    "Accept-Language": "zh-CN",
    "Content-Type": "application/json",
}
FIRMWARE_BODY = {
    "version": 2,
    "language": "zh-CN",
    "flash_size": 16777216,
    "minimum_free_heap_size": "7265",
    "mac_address": "02:00:00:00:00:0a",
    "uuid": "6f1c1a52-0a5e-4d0e-9b3f-1a2b3c4d5e6f",
    "chip_model_name": "esp32s3",
    "chip_info": {"model": 9, "cores": 2, "revision": 2, "features": 18},
    "application": {"name": "xiaozhi", "version": "1.6.2", "compile_time": "Jan 1 2026T00:00:00Z"},
    "partition_table": [{"label": "nvs", "type": 1, "subtype": 2, "address": 36864, "size": 16384}],
    "ota": {"label": "ota_0"},
    "board": {"type": "bread-compact-wifi", "ssid": "lab", "rssi": -50, "channel": 1, "ip": "192.0.2.10"},
}
# what xiaozhi-sdk 0.5.1 sends (xiaozhi_sdk/ota.py OtaDevice.activate_device): the URL with one slash added
SDK_HEADERS = {
    "user-agent": "Linux lab/0.5.1",
    "Device-Id": "02:00:00:00:00:0b",
    "Client-Id": "c3a5f1de-0000-5000-8000-000000000000",
    "Content-Type": "application/json",
    "Accept-Language": "en-US",
    "serial-number": "",
}
SDK_BODY = {
    "application": {"version": "0.5.1", "cpu_count": 2, "system": "Linux"},
    "board": {"type": "xiaozhi-sdk", "name": "xiaozhi-sdk", "ip": "192.0.2.11", "mac_addr": "02:00:00:00:00:0b"},
}


@contextlib.asynccontextmanager
async def _front(token: str = TOKEN) -> AsyncIterator[tuple[str, str]]:
    """The lab's WebSocket gateway and its OTA endpoint; yields the OTA URL and the WebSocket URL it tells."""
    server = await start_websocket_server(WebSocketSettings(port=0, token=token), ScriptedTurns(), RealClock())
    async with server:
        ws_url = server_url("127.0.0.1", server.sockets[0].getsockname()[1], "/xiaozhi/v1/")
        settings = OtaSettings(ws_url, "127.0.0.1", 0, token, timezone_offset_min=480)
        async with OtaServer(settings, FixedClock()) as ota:
            yield server_url("127.0.0.1", ota.port, OTA_PATH, "http"), ws_url


def _expected(version: str, ws_url: str, token: str = TOKEN) -> dict[str, Any]:
    return {
        "server_time": {"timestamp": NOW_NS // 1_000_000, "timezone_offset": 480},
        "firmware": {"version": version, "url": ""},
        "websocket": {"url": ws_url, "token": token},
    }


@pytest.mark.transport
def test_the_ota_answer_to_a_firmware_post_opens_a_session_with_the_emulator_and_a_get_tells_no_token() -> None:
    async def scenario() -> tuple[dict[str, Any], str, str, bool]:
        async with _front() as (ota_url, ws_url), aiohttp.ClientSession() as http:
            async with http.post(ota_url, headers=FIRMWARE_HEADERS, data=json.dumps(FIRMWARE_BODY)) as response:
                assert response.status == 200 and response.content_type == "application/json"
                answer = await response.json()
            async with http.get(ota_url, headers={k: FIRMWARE_HEADERS[k] for k in ("Device-Id", "Client-Id")}) as r:
                assert r.status == 200 and r.content_type == "text/plain"  # as the real server's handle_get
                get = await r.text()
            told = answer["websocket"]
            settings = DeviceSettings(url=told["url"], token=told["token"], device_id=FIRMWARE_HEADERS["Device-Id"])
            async with EmulatedDevice(settings, RealClock()) as device:
                ok = (await device.turn(Ask(clip(), SPEECH_END_MS, "q", 1, ""))).ok
        return answer, get, ws_url, ok

    post, get, ws_url, ok = real(scenario)
    assert post == _expected("1.6.2", ws_url)  # the device's own version: no update offered
    assert ws_url in get and TOKEN not in get
    assert ok


def test_no_web_page_may_read_the_ota_answer_unless_its_origin_is_named() -> None:
    """The answer holds the device's credentials (the bearer token, a signed MQTT password): a page the user
    opens elsewhere must not read it off a lab on localhost. The real server allows every origin."""

    async def answer(origin: str, page_origin: str) -> tuple[dict[str, str], dict[str, str]]:
        settings = OtaSettings("ws://127.0.0.1:1/xiaozhi/v1/", "127.0.0.1", 0, TOKEN, cors_origin=origin)
        async with OtaServer(settings, FixedClock()) as ota, aiohttp.ClientSession() as http:
            url = server_url("127.0.0.1", ota.port, OTA_PATH, "http")
            page = {"Origin": page_origin, "Access-Control-Request-Method": "POST"}
            async with http.options(url, headers=page) as preflight:
                allowed = {k: v for k, v in preflight.headers.items() if k.startswith("Access-Control")}
            async with http.post(url, headers={**FIRMWARE_HEADERS, "Origin": page_origin}, json={}) as r:
                read = {k: v for k, v in r.headers.items() if k.startswith("Access-Control")}
        return allowed, read

    allowed, read = real(lambda: answer("", "https://evil.example"))  # a foreign page is refused outright too
    assert allowed == {} and read == {}
    allowed, read = real(lambda: answer("https://console.example", "https://console.example"))
    assert read["Access-Control-Allow-Origin"] == "https://console.example"
    assert allowed["Access-Control-Allow-Origin"] == "https://console.example"


def test_xiaozhi_sdks_ota_request_is_answered_and_a_lab_without_token_tells_an_empty_one() -> None:
    async def scenario() -> tuple[dict[str, Any], str]:
        async with _front(token="") as (ota_url, ws_url), aiohttp.ClientSession() as http:
            url = ota_url.rstrip("/") + "/"
            async with http.post(url, headers=SDK_HEADERS, data=json.dumps(SDK_BODY)) as response:
                assert response.status == 200
                answer = await response.json()
            # the sdk then connects with "Authorization: Bearer " + the token, empty here (core.py connect_websocket)
            headers = {"Authorization": f"Bearer {answer['websocket']['token']}", "Device-Id": SDK_HEADERS["Device-Id"]}
            hello = await _hello_over(answer["websocket"]["url"], additional_headers=headers)
            assert hello["type"] == "hello"
        return answer, ws_url

    answer, ws_url = real(scenario)
    assert answer == _expected("0.5.1", ws_url, token="")


def test_a_bad_ota_request_is_answered_400_and_the_endpoint_goes_on() -> None:
    async def scenario() -> list[tuple[int, str]]:
        out = []
        async with _front() as (ota_url, _), aiohttp.ClientSession() as http:
            for headers, body in (
                (FIRMWARE_HEADERS, b"{not json"),
                (FIRMWARE_HEADERS, b"\xff\xfe\x00"),
                (FIRMWARE_HEADERS, b"[1, 2]"),
                ({"Content-Type": "application/json"}, json.dumps(FIRMWARE_BODY).encode()),
            ):
                async with http.post(ota_url, headers=headers, data=body) as response:
                    out.append((response.status, (await response.json())["message"]))
            async with http.post(ota_url.rstrip("/"), headers=FIRMWARE_HEADERS, data=json.dumps(FIRMWARE_BODY)) as r:
                out.append((r.status, (await r.json())["firmware"]["version"]))
        return out

    answers = real(scenario)
    assert [status for status, _ in answers] == [400, 400, 400, 400, 200]
    assert "not JSON" in answers[0][1] and "not JSON" in answers[1][1] and "not a JSON object" in answers[2][1]
    assert "Device-Id and Client-Id" in answers[3][1]
    assert answers[4][1] == "1.6.2"


def test_serve_tells_devices_the_public_host_not_the_bind_address() -> None:
    front = serve.OtaFront("192.0.2.7", 0, TOKEN)
    settings = front.settings(WebSocketSettings(host="0.0.0.0", port=0), 8123)
    assert settings.cors_origin == ""
    assert settings.websocket_url == "ws://192.0.2.7:8123/xiaozhi/v1/"
    assert (settings.host, settings.token) == ("0.0.0.0", TOKEN)
    assert server_url("fd00::7", 8000, "/xiaozhi/v1/") == "ws://[fd00::7]:8000/xiaozhi/v1/"
