"""Attacks on the lab server's doors replayed (issue 42, holes 4-6): credentials for any Device-Id and a second
CONNECT taking a device's session; Host and Origin a page chooses (DNS rebinding); idle sockets by the thousand.

Real loopback connections throughout, against the OTA endpoint, the MQTT front end and the WebSocket door.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from typing import Any

import aiohttp
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from pipeline.clock import RealClock, VirtualClock, run_on_clock
from pipeline.endpoints.doors import HttpLimits
from pipeline.transport.server.mqtt_connection import NOT_AUTHORIZED
from pipeline.transport.server.ota_endpoint import OtaServer, OtaSettings
from pipeline.transport.server.server_settings import DoorSettings
from pipeline.transport.wire import mqtt_identity
from pipeline.transport.wire import mqtt_packets as mp
from tests.transport.server.test_mqtt_front import HELLO, KEY, MAC, UUID, front_end, raw
from tests.transport.server.test_websocket import ScriptedTurns, gateway, real

OTHER_MAC = "02:00:00:00:00:99"


async def ota_post(port: int, device: str, **headers: str) -> tuple[int, dict[str, Any]]:
    """The OTA's status and JSON answer to a firmware's POST as ``device``."""
    sent = {"Device-Id": device, "Client-Id": UUID, "Content-Type": "application/json", **headers}
    body = json.dumps({"application": {"name": "xiaozhi", "version": "1.0.0"}})
    url = f"http://127.0.0.1:{port}/xiaozhi/ota/"
    async with aiohttp.ClientSession() as http, http.post(url, data=body, headers=sent) as response:
        text = await response.text()
        return response.status, json.loads(text) if response.content_type == "application/json" else {"text": text}


def ota_settings(mqtt_port: int, **changes: Any) -> OtaSettings:
    endpoint = f"127.0.0.1:{mqtt_port}"
    return OtaSettings(
        "ws://127.0.0.1:1/xiaozhi/v1/", port=0, mqtt_endpoint=endpoint, mqtt_signature_key=KEY, **changes
    )


# --- hole 4: credentials for any Device-Id, and a second CONNECT with them -----------------------------------


def test_credentials_the_ota_gives_anyone_cannot_take_a_connected_devices_session(caplog: Any) -> None:
    async def scenario() -> tuple[int, bool, str]:
        async with (
            front_end() as lab,
            OtaServer(ota_settings(lab.mqtt_address[1]), RealClock()) as ota,
            raw(lab) as victim,
            raw(lab) as attacker,
        ):
            _, honest = await ota_post(ota.port, MAC)
            mqtt = honest["mqtt"]
            assert await victim.connect(mqtt["client_id"], mqtt["username"], password=mqtt["password"]) == 0
            await victim.publish(HELLO)
            await victim.message()
            _, stolen = await ota_post(ota.port, MAC)  # the real OTA's rule too: any Device-Id is answered
            mqtt = stolen["mqtt"]
            code = await attacker.connect(mqtt["client_id"], mqtt["username"], password=mqtt["password"])
            victim_kept = not await victim.closed(0.5)
            await victim.publish(HELLO)  # the victim's session goes on
            _, again = await victim.message()
            return code, victim_kept, again["type"]

    with caplog.at_level(logging.WARNING):
        assert real(scenario) == (mp.IDENTIFIER_REJECTED, True, "hello")
    assert "duplicate_connect = refuse" in caplog.text


def test_a_second_connect_replaces_the_first_only_under_the_replace_policy_and_it_is_said(caplog: Any) -> None:
    async def scenario() -> tuple[int, bool]:
        replace = DoorSettings(duplicate_connect="replace")
        async with front_end(door=replace) as lab, raw(lab) as first, raw(lab) as second:
            await first.connect()
            code = await second.connect()
            return code, await first.closed(2)

    with caplog.at_level(logging.WARNING):
        assert real(scenario) == (mp.ACCEPTED, True)
    assert "is dropped (duplicate_connect = replace)" in caplog.text


def test_a_duplicate_policy_the_server_does_not_know_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="duplicate_connect 'takeover': one of refuse, replace"):
        DoorSettings(duplicate_connect="takeover")


def test_only_listed_devices_get_credentials_and_come_in_when_devices_are_listed() -> None:
    door = DoorSettings(allowed_devices=(MAC.upper(),))  # a MAC in either case

    async def scenario() -> tuple[int, bool, int, bool, int, int]:
        async with (
            front_end(door=door) as lab,
            OtaServer(ota_settings(lab.mqtt_address[1], door=door), RealClock()) as ota,
        ):
            listed, listed_answer = await ota_post(ota.port, MAC)
            other, other_answer = await ota_post(ota.port, OTHER_MAC)
            async with raw(lab) as device:
                code = await device.connect()
            unlisted = "GID_test@@@02_00_00_00_00_99@@@x"
            user = mqtt_identity.username({})
            async with raw(lab) as stranger:
                refused = await stranger.connect(unlisted, user, password=mqtt_identity.password(unlisted, user, KEY))
        return listed, "mqtt" in listed_answer, other, "mqtt" in other_answer, code, refused

    assert real(scenario) == (200, True, 403, False, mp.ACCEPTED, NOT_AUTHORIZED)


def test_the_websocket_door_lets_in_only_listed_devices_when_devices_are_listed() -> None:
    async def scenario() -> tuple[str, str]:
        async with gateway(ScriptedTurns(), door=DoorSettings(allowed_devices=(MAC,))) as url:
            outcomes = []
            for device in (MAC, OTHER_MAC):
                try:
                    async with connect(url, additional_headers={"Device-Id": device}):
                        outcomes.append("in")
                except InvalidStatus as exc:
                    outcomes.append(str(exc.response.status_code))
        return outcomes[0], outcomes[1]

    assert real(scenario) == ("in", "403")


# --- hole 5: a Host or an Origin a web page chooses ------------------------------------------------------------


@pytest.mark.parametrize("mqtt", [False, True], ids=["token", "mqtt password"])
def test_a_rebinding_page_naming_its_own_host_gets_no_credential(mqtt: bool) -> None:
    async def scenario() -> list[tuple[int, bool]]:
        async with front_end() as lab:
            settings = ota_settings(lab.mqtt_address[1], token="s3cret")
            settings = settings if mqtt else dataclasses.replace(settings, mqtt_endpoint="")
            async with OtaServer(settings, RealClock()) as ota:
                seen = []
                for host in (f"evil.example:{ota.port}", f"127.0.0.1:{ota.port}", f"localhost:{ota.port}"):
                    status, answer = await ota_post(ota.port, MAC, Host=host)
                    credential = answer.get("mqtt", {}).get("password") or answer.get("websocket", {}).get("token")
                    seen.append((status, bool(credential)))
                return seen

    assert real(scenario) == [(403, False), (200, True), (200, True)]


def test_the_ota_refuses_a_foreign_pages_origin_and_answers_devices_which_send_none() -> None:
    door = DoorSettings(allowed_origins=("https://console.example",))

    async def scenario() -> list[int]:
        settings = OtaSettings("ws://127.0.0.1:1/xiaozhi/v1/", port=0, cors_origin="http://lab.example:8080", door=door)
        async with OtaServer(settings, RealClock()) as ota:
            origins = ("http://evil.example", "null", "http://localhost:5173", "https://console.example")
            statuses = [(await ota_post(ota.port, MAC, Origin=origin))[0] for origin in origins]
            statuses.append((await ota_post(ota.port, MAC, Origin="http://lab.example:8080"))[0])  # cors_origin
            statuses.append((await ota_post(ota.port, MAC))[0])  # a device: no Origin
            return statuses

    assert real(scenario) == [403, 403, 200, 200, 200, 200]


def test_the_websocket_door_refuses_a_foreign_pages_origin_and_lets_devices_in() -> None:
    async def scenario() -> list[str]:
        door = DoorSettings(allowed_origins=("https://console.example",))
        async with gateway(ScriptedTurns(), door=door) as url:
            outcomes = []
            for origin in ("http://evil.example", None, "http://127.0.0.1:5173", "https://console.example"):
                extra: dict[str, Any] = {"origin": origin} if origin else {}
                try:
                    async with connect(url, **extra):
                        outcomes.append("in")
                except InvalidStatus as exc:
                    outcomes.append(str(exc.response.status_code))
            return outcomes

    assert real(scenario) == ["403", "in", "in", "in"]


# --- hole 6: idle sockets by the thousand ----------------------------------------------------------------------


class Idle:
    """``count`` connections to ``port`` that never send a byte."""

    def __init__(self, port: int, count: int) -> None:
        self.port, self.count = port, count
        self.opened: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def __aenter__(self) -> Idle:
        self.opened = [await asyncio.open_connection("127.0.0.1", self.port) for _ in range(self.count)]
        await asyncio.sleep(0.1)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for _, writer in self.opened:
            writer.close()

    def still_open(self) -> int:
        """How many the server has not closed."""
        return sum(not reader.at_eof() for reader, _ in self.opened)


def test_idle_sockets_past_the_otas_cap_leave_an_honest_device_answered() -> None:
    """Attack: 1,100 idle OTA sockets under a 1,024-descriptor limit locked an honest device out (issue 42)."""
    door = DoorSettings(http=HttpLimits(max_connections=8))

    async def scenario() -> tuple[int, int, int]:
        settings = OtaSettings("ws://127.0.0.1:1/xiaozhi/v1/", port=0, door=door)
        async with OtaServer(settings, RealClock()) as ota, Idle(ota.port, 20) as idle:
            status, _ = await ota_post(ota.port, MAC)
            await asyncio.sleep(0.1)
            assert ota.door is not None and ota.door.server is not None
            return status, len(ota.door.server.connections), idle.still_open()

    status, open_now, idle_left = real(scenario)
    assert status == 200 and open_now <= 8 and idle_left == 7  # the device's connection took a place, then left


def test_an_ota_connection_that_sends_nothing_is_closed_at_its_idle_limit() -> None:
    async def scenario() -> tuple[int, int]:
        settings = OtaSettings("ws://127.0.0.1:1/xiaozhi/v1/", port=0, door=DoorSettings(http=HttpLimits(idle_s=15.0)))
        async with OtaServer(settings, VirtualClock()) as ota, Idle(ota.port, 1) as idle:
            await asyncio.sleep(14.899)  # 15 s after it connected, less the 0.1 s Idle waited
            before = idle.still_open()
            await asyncio.sleep(0.002)
            return before, idle.still_open()

    assert run_on_clock(scenario(), VirtualClock()) == (1, 0)


def _port(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


def test_a_websocket_handshake_that_never_comes_is_dropped_at_its_timeout() -> None:
    async def scenario() -> tuple[int, int]:
        door = DoorSettings(handshake_timeout_s=3.0)
        async with gateway(ScriptedTurns(), door=door) as url, Idle(_port(url), 1) as idle:
            await asyncio.sleep(2.899)
            before = idle.still_open()
            await asyncio.sleep(0.002)
            return before, idle.still_open()

    assert run_on_clock(scenario(), VirtualClock()) == (1, 0)


def test_idle_sockets_past_the_websocket_doors_waiting_cap_leave_a_device_its_handshake() -> None:
    async def scenario() -> tuple[str, int]:
        async with gateway(ScriptedTurns(), door=DoorSettings(max_waiting=4)) as url, Idle(_port(url), 10) as idle:
            async with connect(url):
                outcome = "in"
            await asyncio.sleep(0.1)
            return outcome, idle.still_open()

    assert real(scenario) == ("in", 3)  # the device's handshake took a place too, then left it


def test_idle_sockets_past_the_mqtt_waiting_cap_leave_a_device_its_connect() -> None:
    async def scenario() -> tuple[int, int]:
        async with front_end(door=DoorSettings(max_waiting=4)) as lab, Idle(lab.mqtt_address[1], 10) as idle:
            async with raw(lab) as device:
                code = await device.connect()
            await asyncio.sleep(0.1)
            return code, idle.still_open()

    assert real(scenario) == (mp.ACCEPTED, 3)
