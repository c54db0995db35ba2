"""The lab's MQTT front end as a stock firmware meets it, and the emulator's MQTT link as the gateway meets it.

Real loopback connections throughout: an aiomqtt client or a raw socket (for what a firmware must not
do) against ``MqttFrontEnd``, and the emulator's ``MqttUdpLink`` against a recording server built on
the same packet codec, so that what it sends is seen byte for byte.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiomqtt
import pytest

from pipeline.clock import RealClock
from pipeline.run.device_side import Ask
from pipeline.transport.device.device import DeviceError, DeviceSettings, EmulatedDevice
from pipeline.transport.device.device_settings import LinkSettings, stable_client_id
from pipeline.transport.device.mqtt_udp_link import MqttUdpLink
from pipeline.transport.server.mqtt_front import MqttFrontEnd, MqttFrontSettings
from pipeline.transport.server.ota_endpoint import OtaServer, OtaSettings
from pipeline.transport.server.server_settings import DoorSettings
from pipeline.transport.wire import mqtt_identity
from pipeline.transport.wire import mqtt_packets as mp
from pipeline.transport.wire.messages import Listen
from pipeline.transport.wire.opus import OpusEncoder
from pipeline.transport.wire.udp import PacketCrypto
from tests.transport.server.test_websocket import SPEECH_END_MS, ScriptedTurns, clip, real
from tests.wire_helpers import FIRMWARE_AUDIO

KEY = "Lab-signature-Key9"  # a test's own key, never a real one
MAC = "02:00:00:00:00:07"
UUID = "36c98363-3656-43cb-a00f-8bced2391a90"
CONFIG = mqtt_identity.device_config("127.0.0.1:1883", MAC, UUID, KEY)
HELLO = {"type": "hello", "version": 3, "transport": "udp", "audio_params": FIRMWARE_AUDIO}


@contextlib.asynccontextmanager
async def front_end(turns: ScriptedTurns | None = None, **changes: Any) -> AsyncIterator[MqttFrontEnd]:
    settings = MqttFrontSettings(port=0, **{"signature_key": KEY, **changes})
    async with MqttFrontEnd(settings, turns or ScriptedTurns(), RealClock()) as gateway:
        yield gateway


class RawDevice:
    """A socket speaking MQTT packet by packet, to do what a firmware does and what it must not."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def to(cls, gateway: MqttFrontEnd) -> RawDevice:
        return cls(*await asyncio.open_connection(*gateway.mqtt_address))

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def connect(self, client: str = CONFIG.client_id, user: str = CONFIG.username, **kw: Any) -> int:
        """The CONNACK code, or -1 when the connection closed without one."""
        password = kw.pop("password", CONFIG.password)
        await self.send(mp.connect(mp.Connect(kw.pop("level", 4), kw.pop("keep_alive", 60), client, user, password)))
        packet = await self.packet()
        return -1 if packet is None else packet.body[1]

    async def packet(self, within_s: float = 5.0) -> mp.MqttPacket | None:
        async with asyncio.timeout(within_s):
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                return await mp.read_packet(self.reader, 1 << 20)
        return None

    async def publish(self, message: dict[str, Any], topic: str = mqtt_identity.PUBLISH_TOPIC, qos: int = 0) -> None:
        await self.send(mp.publish(topic, json.dumps(message).encode(), qos))

    async def message(self, within_s: float = 5.0) -> tuple[str, dict[str, Any]]:
        """The next PUBLISH pushed to us: its topic and JSON."""
        while True:
            packet = await self.packet(within_s)
            assert packet is not None, "the connection closed"
            if packet.kind == mp.PUBLISH:
                publish = mp.parse_publish(packet)
                return publish.topic, json.loads(publish.payload)

    async def closed(self, within_s: float = 5.0) -> bool:
        """Whether the server closes the connection within the time (what it sent meanwhile is skipped)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within_s):
                while await self.packet(within_s) is not None:
                    pass
                return True
        return False

    def close(self) -> None:
        self.writer.close()


@contextlib.asynccontextmanager
async def raw(gateway: MqttFrontEnd) -> AsyncIterator[RawDevice]:
    device = await RawDevice.to(gateway)
    try:
        yield device
    finally:
        device.close()


# --- a firmware-like client ---------------------------------------------------------------------


@pytest.mark.transport
def test_a_firmware_like_client_is_answered_on_its_p2p_topic_without_subscribing_and_gets_a_whole_turn() -> None:
    turns = ScriptedTurns()

    async def scenario() -> tuple[list[tuple[str, dict[str, Any]]], int]:
        async with front_end(turns) as lab:
            port, told = lab.mqtt_address[1], []
            client = aiomqtt.Client(
                "127.0.0.1", port, identifier=CONFIG.client_id, username=CONFIG.username, password=CONFIG.password
            )
            async with client:  # and never subscribes
                messages = aiter(client.messages)

                async def next_message() -> dict[str, Any]:
                    async with asyncio.timeout(10):
                        message = await anext(messages)
                    assert isinstance(message.payload, bytes | bytearray)
                    said: dict[str, Any] = json.loads(bytes(message.payload))
                    told.append((str(message.topic), said))
                    return said

                await client.publish("device-server", json.dumps({**HELLO, "features": {}}))
                hello = await next_message()
                udp = hello["udp"]
                crypto = PacketCrypto(bytes.fromhex(udp["key"]), bytes.fromhex(udp["nonce"]))
                heard: list[bytes] = []
                loop = asyncio.get_running_loop()
                socket, _ = await loop.create_datagram_endpoint(
                    lambda: _Collect(heard), remote_addr=(udp["server"], udp["port"])
                )
                session = hello["session_id"]
                listen = {"type": "listen", "state": "start", "mode": "auto", "session_id": session}
                await client.publish("device-server", json.dumps(listen))
                encoder = OpusEncoder("firmware")
                for seq, frame in enumerate(clip(), start=1):
                    socket.sendto(crypto.seal(encoder.encode(frame.pcm), seq * 60, seq))
                    await asyncio.sleep(0.06)
                while not (told[-1][1]["type"] == "tts" and told[-1][1].get("state") == "stop"):
                    await next_message()
                await asyncio.sleep(0.2)
                socket.close()
                played = sum(1 for d in heard if crypto.open(d).payload)
            await turns.settled(1)
        return told, played

    told, played = real(scenario)
    topics = {topic for topic, _ in told}
    assert topics == {"devices/p2p/02_00_00_00_00_07"}
    hello = told[0][1]
    assert hello["type"] == "hello" and hello["version"] == 3 and hello["transport"] == "udp"
    assert hello["udp"]["encryption"] == "aes-128-ctr" and hello["udp"]["server"] == "127.0.0.1"
    kinds = [(m["type"], m.get("state")) for _, m in told]
    assert ("stt", None) in kinds and ("tts", "start") in kinds and ("tts", "sentence_start") in kinds
    assert kinds[-1] == ("tts", "stop")
    assert played > 0  # the answer's audio came back over UDP
    _, server = turns.done[0]
    # the turn's packets are those up to its end-point, 600 ms after the speech; the rest went to the next listener
    assert server.ok and server.packets is not None and server.packets.received >= 3 + 10 + 600 // 60


class _Collect(asyncio.DatagramProtocol):
    def __init__(self, into: list[bytes]) -> None:
        self.into = into

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.into.append(data)


# --- what a firmware must not do ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"password": "not-the-signature"}, mp.BAD_CREDENTIALS),
        ({"password": ""}, mp.BAD_CREDENTIALS),
        ({"client": "lab-device-1234"}, mp.IDENTIFIER_REJECTED),
        ({"client": "a@@@b@@@c@@@d"}, mp.IDENTIFIER_REJECTED),
        ({"level": 5}, mp.UNACCEPTABLE_PROTOCOL),
    ],
)
def test_a_connect_the_gateway_would_refuse_is_refused_with_the_connack_code_that_says_why(
    changes: dict[str, Any], code: int
) -> None:
    async def scenario() -> tuple[int, bool]:
        async with front_end() as lab, raw(lab) as device:
            return await device.connect(**changes), await device.closed(2)

    assert real(scenario) == (code, True)


def test_credentials_are_checked_only_with_a_key_and_a_legacy_client_id_needs_a_mac() -> None:
    user = mqtt_identity.username({})

    async def scenario() -> list[int]:
        codes = []
        async with front_end(signature_key="") as lab:
            for client, password in (
                (CONFIG.client_id, "anything"),
                ("GID_test@@@02_00_00_00_00_09", ""),
                ("GID_test@@@not_a_mac", ""),
                ("GID_test@@@02_00_00_00_00_09@@@" + "u" * 300, ""),  # a session's key and a log line: bounded
                ("GID_\x1b[2J@@@02_00_00_00_00_09@@@u", ""),  # an escape sequence for the operator's terminal
            ):
                async with raw(lab) as device:
                    codes.append(await device.connect(client, user, password=password))
        async with front_end() as lab, raw(lab) as device:  # with a key, a legacy id is signed too
            legacy = "GID_test@@@02_00_00_00_00_09"
            codes.append(await device.connect(legacy, user, password=mqtt_identity.password(legacy, user, KEY)))
        async with front_end() as lab, raw(lab) as device:
            bad_user = mqtt_identity.password(CONFIG.client_id, "not-base64-json", KEY)
            codes.append(await device.connect(CONFIG.client_id, "not-base64-json", password=bad_user))
        return codes

    rejected = mp.IDENTIFIER_REJECTED
    assert real(scenario) == [0, 0, rejected, rejected, rejected, 0, mp.BAD_CREDENTIALS]


@pytest.mark.parametrize(
    "misbehaviour",
    ["qos 1 publish", "hello version 1", "payload not json", "oversized packet", "packet before connect"],
)
def test_what_the_gateway_closes_a_connection_for_closes_it(misbehaviour: str) -> None:
    async def scenario() -> bool:
        async with front_end() as lab, raw(lab) as device:
            if misbehaviour == "packet before connect":
                await device.publish(HELLO)
                return await device.closed(2)
            assert await device.connect() == mp.ACCEPTED
            if misbehaviour == "qos 1 publish":
                await device.publish(HELLO, qos=1)
            elif misbehaviour == "hello version 1":
                await device.publish({**HELLO, "version": 1})
            elif misbehaviour == "payload not json":
                await device.send(mp.publish("device-server", b"hello?"))
            else:  # the gateway's max_mqtt_payload_size: 8 KiB for the whole packet
                await device.publish({**HELLO, "padding": "x" * 9000})
            return await device.closed(2)

    assert real(scenario)


def test_a_subscribe_is_acknowledged_and_replies_still_come_on_the_p2p_topic() -> None:
    async def scenario() -> tuple[mp.MqttPacket | None, str]:
        async with front_end() as lab, raw(lab) as device:
            await device.connect()
            await device.send(mp.subscribe(77, "some/topic"))
            suback = await device.packet()
            await device.publish(HELLO)
            topic, _ = await device.message()
            return suback, topic

    suback, topic = real(scenario)
    assert suback is not None and suback.kind == mp.SUBACK and suback.body == b"\x00\x4d\x00"
    assert topic == "devices/p2p/02_00_00_00_00_07"


@pytest.mark.realtime
def test_a_quiet_connection_is_closed_after_one_and_a_half_keep_alives_and_pings_keep_it_open() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        async with front_end() as lab:
            async with raw(lab) as quiet:
                await quiet.connect(keep_alive=1)
                still_open = not await quiet.closed(1.2)  # 1.5 s allowed
                closed_after = await quiet.closed(1.5)
            async with raw(lab) as pinging:
                await pinging.connect(keep_alive=1)
                for _ in range(5):  # 2.5 s in all, each ping within the 1.5 s
                    await pinging.send(mp.PINGREQ_PACKET)
                    answer = await pinging.packet(0.5)
                    assert answer is not None and answer.kind == mp.PINGRESP
                    await asyncio.sleep(0.5)
                pinged_open = not await pinging.closed(0.1)
        return still_open, closed_after, pinged_open

    assert real(scenario) == (True, True, True)


def test_a_repeated_hello_opens_a_new_session_and_the_old_one_ends_untold() -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any], bool, int, list[dict[str, Any]]]:
        async with front_end() as lab, raw(lab) as device:
            await device.connect()
            await device.publish(HELLO)
            _, first = await device.message()
            old = lab.sessions[MAC]
            await device.publish(HELLO)
            _, second = await device.message()
            await asyncio.sleep(0.1)
            told = []
            with contextlib.suppress(TimeoutError, AssertionError):
                while True:
                    told.append((await device.message(0.3))[1])
            return first, second, old.closed and lab.sessions[MAC] is not old, len(lab.tasks), told

    first, second, replaced, tasks, told = real(scenario)
    assert first["session_id"] and second["session_id"] and first["session_id"] != second["session_id"]
    assert first["udp"]["key"] != second["udp"]["key"]  # a fresh key for each hello, as the gateway gives
    assert replaced and tasks == 1 and told == []  # nothing said for the dead session


def test_goodbye_and_udp_timeout_end_the_session_and_a_message_without_one_is_told_goodbye() -> None:
    async def scenario() -> list[dict[str, Any]]:
        said = []
        async with front_end() as lab, raw(lab) as device:
            await device.connect()
            for ending in ("goodbye", "udp_timeout"):
                await device.publish(HELLO)
                _, hello = await device.message()
                await device.publish({"type": ending, "session_id": hello["session_id"]})
                said.append({**(await device.message())[1], "hello": hello["session_id"]})
            listen = {"type": "listen", "state": "start", "mode": "auto", "session_id": "gone-1"}
            await device.publish(listen)
            said.append((await device.message())[1])
            await device.publish({"type": "goodbye", "session_id": "gone-2"})  # no session: nothing to say
            await device.publish(listen)
            said.append((await device.message())[1])
            assert not lab.sessions
        return said

    goodbye, udp_timeout, no_session, after = real(scenario)
    assert goodbye["type"] == "goodbye" and goodbye["session_id"] == goodbye["hello"]
    assert udp_timeout["type"] == "goodbye" and udp_timeout["session_id"] == udp_timeout["hello"]
    assert no_session == {"type": "goodbye", "session_id": "gone-1"} == after  # no goodbye answered goodbye


def test_every_goodbye_names_the_session_a_protocol_error_ended() -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with front_end() as lab, raw(lab) as device:
            await device.connect()
            await device.publish(HELLO)
            _, hello = await device.message()
            for _ in range(300):  # at once: a flood, past the control bucket's burst of 200
                await device.publish({"type": "listen", "state": "start", "mode": "auto"})
            while (message := (await device.message())[1])["type"] != "goodbye":
                pass
            return hello, message

    hello, goodbye = real(scenario)
    assert goodbye["type"] == "goodbye" and goodbye["session_id"] == hello["session_id"]
    assert goodbye["code"] == 1008 and "control messages" in goodbye["reason"]


def test_a_second_connection_with_the_same_client_id_replaces_the_first_under_the_gateways_policy() -> None:
    async def scenario() -> tuple[bool, bool]:
        replace = DoorSettings(duplicate_connect="replace")  # the gateway's (app.js addConnection)
        async with front_end(door=replace) as lab, raw(lab) as first, raw(lab) as second:
            await first.connect()
            await first.publish(HELLO)
            await first.message()
            assert await second.connect() == mp.ACCEPTED
            first_closed = await first.closed(2)
            await second.publish(HELLO)
            _, hello = await second.message()
            return first_closed, hello["type"] == "hello" and len(lab.sessions) == 1

    assert real(scenario) == (True, True)


def test_the_hello_advertises_the_public_host_and_a_wildcard_is_refused() -> None:
    async def scenario() -> tuple[dict[str, Any], int]:
        async with front_end(udp_public_host="lab.example.test") as lab, raw(lab) as device:
            await device.connect()
            await device.publish(HELLO)
            return (await device.message())[1], lab.udp_address[1]

    hello, udp_port = real(scenario)
    assert hello["udp"]["server"] == "lab.example.test" and hello["udp"]["port"] == udp_port
    for wildcard in ("0.0.0.0", "::"):
        with pytest.raises(ValueError, match="--public-host"):
            MqttFrontEnd(MqttFrontSettings(host=wildcard), ScriptedTurns(), RealClock())
    on_all = MqttFrontSettings(host="0.0.0.0", udp_public_host="192.0.2.7")
    assert MqttFrontEnd(on_all, ScriptedTurns(), RealClock()).public_host == "192.0.2.7"


# --- the emulator's link, as the gateway sees it --------------------------------------------------


@dataclass
class Recorder:
    """An MQTT server that answers hello as the gateway does and keeps what each connection sent."""

    connects: list[mp.Connect] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    published: list[dict[str, Any]] = field(default_factory=list)
    other_packets: list[int] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            packet = await mp.read_packet(reader, 1 << 16)
            assert packet is not None and packet.kind == mp.CONNECT
            connect = mp.parse_connect(packet)
            self.connects.append(connect)
            writer.write(mp.connack(0))
            reply_to = "devices/p2p/" + connect.client_id.split("@@@")[1]
            while (packet := await mp.read_packet(reader, 1 << 16)) is not None:
                if packet.kind != mp.PUBLISH:
                    self.other_packets.append(packet.kind)
                    continue
                publish = mp.parse_publish(packet)
                message = json.loads(publish.payload)
                self.topics.append(publish.topic)
                self.published.append(message)
                if message["type"] == "hello":
                    udp = {"server": "127.0.0.1", "port": 9, "encryption": "aes-128-ctr"}
                    udp |= {"key": "00" * 16, "nonce": "01" + "00" * 15}
                    answer = {"type": "hello", "version": 3, "transport": "udp", "session_id": "s-1", "udp": udp}
                    writer.write(mp.publish(reply_to, json.dumps(answer).encode()))
            writer.close()


async def _recorded(url_of: Any, *, key: str = KEY, ota: bool = False) -> Recorder:
    recorder = Recorder()
    server = await asyncio.start_server(recorder.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, contextlib.AsyncExitStack() as stack:
        if ota:
            settings = OtaSettings("ws://unused/", port=0, mqtt_endpoint=f"127.0.0.1:{port}", mqtt_signature_key=KEY)
            front = await stack.enter_async_context(OtaServer(settings, RealClock()))
            url = url_of(front.port)
        else:
            url = url_of(port)
        link = MqttUdpLink(LinkSettings(url, device_id=MAC, mqtt_signature_key=key), RealClock())
        await link.open()
        await link.send(Listen("start", mode="auto", session_id=link.session_id))
        await link.close()
    return recorder


def test_the_emulators_link_connects_signed_publishes_to_one_topic_and_never_subscribes() -> None:
    recorder = real(lambda: _recorded(lambda port: f"mqtt://127.0.0.1:{port}"))
    (connect,) = recorder.connects
    uuid = stable_client_id(MAC)
    assert connect.client_id == f"GID_test@@@02_00_00_00_00_07@@@{uuid}"
    assert json.loads(base64.b64decode(connect.username)) == {}
    assert connect.password == mqtt_identity.password(connect.client_id, connect.username, KEY)
    assert mqtt_identity.check(connect.client_id, connect.username, connect.password, KEY).uuid == uuid
    assert set(recorder.topics) == {"device-server"}
    assert mp.SUBSCRIBE not in recorder.other_packets  # nor anything but pings and the closing DISCONNECT
    assert set(recorder.other_packets) <= {mp.PINGREQ, mp.DISCONNECT}
    hello = recorder.published[0]
    assert hello["type"] == "hello" and hello["version"] == 3 and hello["transport"] == "udp"
    assert [m["type"] for m in recorder.published] == ["hello", "listen", "goodbye"]


def test_the_emulators_link_takes_a_topic_and_group_from_its_url() -> None:
    recorder = real(lambda: _recorded(lambda port: f"mqtt://127.0.0.1:{port}/lab-up?group=GID_lab", key=""))
    (connect,) = recorder.connects
    assert connect.client_id.startswith("GID_lab@@@02_00_00_00_00_07@@@") and connect.password == ""
    assert set(recorder.topics) == {"lab-up"}


def test_the_emulators_link_connects_with_what_an_ota_endpoint_tells_it() -> None:
    recorder = real(lambda: _recorded(lambda port: f"http://127.0.0.1:{port}/xiaozhi/ota/", key="", ota=True))
    (connect,) = recorder.connects
    identity = mqtt_identity.check(connect.client_id, connect.username, connect.password, KEY)
    assert (identity.group, identity.mac, identity.uuid) == ("GID_test", MAC, stable_client_id(MAC))
    assert identity.user_data == {"ip": "127.0.0.1"}  # the OTA's user data: the device's address
    assert set(recorder.topics) == {"device-server"}


def test_the_ota_answer_offers_the_mqtt_section_the_gateways_ota_makes() -> None:
    async def scenario() -> dict[str, Any]:
        settings = OtaSettings("ws://lab/xiaozhi/v1/", port=0, mqtt_endpoint="192.0.2.7:1883", mqtt_signature_key=KEY)
        async with OtaServer(settings, RealClock()) as ota:
            import aiohttp

            headers = {"Device-Id": MAC, "Client-Id": UUID}
            async with (
                aiohttp.ClientSession() as http,
                http.post(f"http://127.0.0.1:{ota.port}/xiaozhi/ota/", json={}, headers=headers) as response,
            ):
                answer: dict[str, Any] = await response.json()
                return answer

    answer = real(scenario)
    mqtt = answer["mqtt"]
    assert list(mqtt) == ["endpoint", "port", "client_id", "username", "password", "publish_topic", "subscribe_topic"]
    assert mqtt["endpoint"] == "192.0.2.7:1883" and mqtt["port"] == 1883
    assert mqtt["client_id"] == f"GID_test@@@02_00_00_00_00_07@@@{UUID}"
    assert (mqtt["publish_topic"], mqtt["subscribe_topic"]) == ("device-server", "null")
    identity = mqtt_identity.check(mqtt["client_id"], mqtt["username"], mqtt["password"], KEY)
    assert identity.user_data == {"ip": "127.0.0.1"}
    assert "websocket" not in answer  # one protocol or the other, as the real server (ota_handler.py handle_post)


def test_the_emulator_with_the_wrong_key_is_refused_by_the_front_end() -> None:
    async def scenario() -> str:
        async with front_end() as lab:
            url = f"mqtt://127.0.0.1:{lab.mqtt_address[1]}"
            device = EmulatedDevice(DeviceSettings(url=url, mqtt_signature_key="Wrong-key-1"), RealClock())
            with pytest.raises(DeviceError) as refused:
                async with device:
                    await device.turn(Ask(clip(), SPEECH_END_MS, "q", 1, ""))
            return str(refused.value)

    assert "no session" in real(scenario)


def test_serve_takes_the_signature_key_from_the_environment_and_refuses_it_where_it_cannot_be_used(
    tmp_path: Any, capsys: Any
) -> None:
    from pipeline import serve

    for argv, env, says in (
        (["--mqtt-port", "0", "--mqtt-signature-key-env", "LAB_KEY"], {}, "the variable is not set"),
        (["--mqtt-signature-key-env", "LAB_KEY"], {"LAB_KEY": KEY}, "needs --mqtt-port"),
    ):
        assert serve.main([*argv, "--out", str(tmp_path)], env=env) == 2
        err = capsys.readouterr().err
        assert says in err and KEY not in err
    assert not list(tmp_path.iterdir())  # refused before anything was loaded or written
    args = serve.parse_args(["--mqtt-port", "1883", "--mqtt-signature-key-env", "LAB_KEY"])
    assert serve.mqtt_key(args, {"LAB_KEY": KEY}) == KEY
    assert serve.parse_args([]).mqtt_port is None  # no MQTT unless asked
