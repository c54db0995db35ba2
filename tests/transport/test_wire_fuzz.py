"""Everything a remote peer can send, fuzzed (hypothesis): nothing escapes a handler, memory stays bounded.

Each parser a device, a client or a server of the lab's can reach gets arbitrary input, and input shaped
like the real thing with arbitrary values: WebSocket text and binary frames in each protocol version, a
device session's whole conversation, MQTT packets and a connection's handling of them, UDP datagrams,
OTA bodies, and the speech services' uploads. Each may refuse, with the one error its caller turns into a
counted drop, a close with a reason, or an HTTP error; none may raise anything else, and what each keeps
per peer has a bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from typing import Any

import msgspec
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from pipeline.clock import VirtualClock
from pipeline.endpoints.speech import bodies, forms
from pipeline.endpoints.speech.api_errors import ApiError
from pipeline.endpoints.speech.relay import _request_attributes
from pipeline.transport.device.tools import EmulatedTools
from pipeline.transport.server.flood import Flooded, FloodGuard
from pipeline.transport.server.mqtt_channel import MqttUdpChannel
from pipeline.transport.server.mqtt_connection import Hangup, MqttConnection
from pipeline.transport.server.ota_endpoint import system_info
from pipeline.transport.server.server_settings import DoorSettings, FloodSettings, SessionSettings
from pipeline.transport.wire import framing, mcp, mqtt_identity, ota
from pipeline.transport.wire import mqtt_packets as mp
from pipeline.transport.wire.failures import ChannelGone, ProtocolError
from pipeline.transport.wire.framing import Audio
from pipeline.transport.wire.inbound import from_websocket
from pipeline.transport.wire.messages import KNOWN_TYPES, Malformed, Mcp, Message, Other, decode, encode, read
from pipeline.transport.wire.udp import HEADER, WINDOW, PacketCrypto, PacketError, SequenceCheck
from tests.scenario import TONE
from tests.server_harness import FakeChannel, Turns, session, virtual
from tests.wire_helpers import dump, hello

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW_FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
FIELDS = ("state", "mode", "text", "session_id", "lab", "traceparent", "payload", "reason", "code", "version",
          "transport", "audio_params", "features", "udp", "question_id", "round", "emotion")  # fmt: skip
message_shaped = st.builds(
    lambda kind, fields: {"type": kind, **fields},
    st.sampled_from(sorted(KNOWN_TYPES)) | st.text(max_size=10),
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6),
)
control_text = st.text(max_size=200) | json_values.map(json.dumps) | message_shaped.map(json.dumps)


# --- WebSocket frames -----------------------------------------------------------------------------------


@FUZZ
@given(control_text)
def test_any_control_message_decodes_or_is_a_protocol_error(text: str) -> None:
    with contextlib.suppress(ProtocolError):
        decode(text)
    assert isinstance(read(text), Message | Other | Malformed)


@FUZZ
@given(st.sampled_from(framing.VERSIONS), st.binary(max_size=300) | control_text)
def test_any_websocket_message_of_any_version_is_read_at_the_edge(version: int, data: str | bytes) -> None:
    assert isinstance(from_websocket(version, data), Message | Other | Malformed | Audio)


@FUZZ
@given(
    st.sampled_from((2, 3)),
    st.integers(0, 0xFFFF),
    st.binary(max_size=64) | control_text.map(str.encode),
    st.integers(-3, 3),
)
def test_a_binary_frame_whose_header_lies_is_read_at_the_edge(
    version: int, kind: int, payload: bytes, size_error: int
) -> None:
    frame = bytearray(framing.pack(version, payload, kind=kind % 2))
    header = 16 if version == 2 else 4
    if version == 2:
        frame[2:4] = kind.to_bytes(2, "big")
        frame[12:16] = max(0, len(payload) + size_error).to_bytes(4, "big")
    else:
        frame[0] = kind & 0xFF
        frame[2:4] = max(0, min(0xFFFF, len(payload) + size_error)).to_bytes(2, "big")
    assert len(frame) >= header
    assert isinstance(from_websocket(version, bytes(frame)), Message | Other | Malformed | Audio)


# --- a device session's whole conversation ---------------------------------------------------------------

conversation = st.lists(
    message_shaped.map(lambda m: ("text", json.dumps(m)))
    | st.binary(max_size=40).map(lambda b: ("binary", b))
    | st.just(("tone", b""))
    | st.sampled_from(
        [
            ("text", json.dumps({"type": "listen", "state": "start", "mode": "auto"})),
            ("text", json.dumps({"type": "listen", "state": "detect", "text": "你好小智"})),
            ("text", json.dumps({"type": "abort"})),
        ]
    ),
    max_size=25,
)


@SLOW_FUZZ
@given(conversation)
def test_no_conversation_gets_an_exception_past_the_session(items: list[tuple[str, bytes | str]]) -> None:
    """Whatever a device says after its hello, the session counts it, acts on it or closes with a reason."""
    settings_ = SessionSettings(idle_goodbye_s=0, idle_close_s=0)
    failures: list[dict[str, Any]] = []

    async def device(channel: FakeChannel) -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: failures.append(context))
        channel.say(hello())
        for kind, data in items:
            if kind == "tone":
                channel.frame(TONE)
            else:
                channel.inbox.put_nowait(from_websocket(1, data))
            await asyncio.sleep(0.06)
        await asyncio.sleep(2)

    async def main() -> FakeChannel:
        channel = FakeChannel(settings_, VirtualClock())
        await session(device(channel), channel, Turns(), settings_)
        return channel

    channel = virtual(main())
    assert not failures, failures
    assert channel.closed is None or channel.closed[0] in (1000, 1002, 1008)


# --- MQTT -------------------------------------------------------------------------------------------------


def _reader(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


@FUZZ
@given(st.binary(max_size=400))
def test_any_byte_stream_reads_as_bounded_mqtt_packets_or_a_named_problem(data: bytes) -> None:
    async def read_all() -> None:
        reader = _reader(data)
        while True:
            try:
                packet = await mp.read_packet(reader, 256)
            except (mp.PacketProblem, asyncio.IncompleteReadError):
                return
            if packet is None:
                return
            assert len(packet.body) <= 256

    virtual(read_all())


@FUZZ
@given(st.integers(0, 15), st.integers(0, 15), st.binary(max_size=120))
def test_any_packet_body_parses_or_is_a_packet_problem(kind: int, flags: int, body: bytes) -> None:
    packet = mp.MqttPacket(kind, flags, body)
    for parse in (mp.parse_connect, mp.parse_publish, mp.parse_subscribe):
        with contextlib.suppress(mp.PacketProblem):
            parse(packet)


@FUZZ
@given(st.text(max_size=60), st.text(max_size=60), st.text(max_size=60), st.sampled_from(("", "k3y")))
def test_any_credentials_are_a_device_or_a_credential_error(client: str, user: str, password: str, key: str) -> None:
    with contextlib.suppress(mqtt_identity.CredentialError):
        mqtt_identity.check(client, user, password, key)


class _Writer:
    def __init__(self) -> None:
        self.transport = self
        self.written = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1)


class _Front:
    max_packet_bytes, connect_timeout_s, signature_key = 8192, 1.0, ""
    door, session = DoorSettings(), SessionSettings()
    public_host, rejected_datagrams, udp_port = "127.0.0.1", 0, 9

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.channels: list[MqttUdpChannel] = []

    def room_for(self, connection: MqttConnection) -> int:
        return mp.ACCEPTED

    def joined(self, connection: MqttConnection) -> None:
        pass

    def left(self, connection: MqttConnection) -> None:
        pass

    def open_session(self, connection: MqttConnection) -> MqttUdpChannel:
        channel = MqttUdpChannel(self, connection.publish, "d", connection.guard, self.clock, queue_limit=8)
        self.channels.append(channel)
        return channel

    def sendto(self, data: bytes, address: tuple[str, int]) -> None:
        pass

    def forget(self, channel: MqttUdpChannel) -> None:
        pass


mqtt_packets = st.lists(
    st.builds(
        lambda topic, payload, qos: mp.publish(topic, payload, qos),
        st.text(max_size=10),
        st.binary(max_size=60)
        | control_text.map(str.encode)
        | st.just(json.dumps({"type": "hello", "version": 3, "transport": "udp"}).encode()),
        st.integers(0, 2),
    )
    | st.builds(mp.encode, st.integers(1, 15), st.integers(0, 15), st.binary(max_size=30)),
    max_size=15,
)


@FUZZ
@given(mqtt_packets)
def test_a_connection_handles_any_packets_or_hangs_up_with_a_reason(packets: list[bytes]) -> None:
    """What ``MqttConnection.run`` catches is all that may come out: it closes the connection with that reason."""

    async def connection() -> None:
        clock = VirtualClock()
        front = _Front(clock)
        conn = MqttConnection(front, _reader(b"".join(packets)), _Writer())  # type: ignore[arg-type]
        conn.open = True
        try:
            while (packet := await mp.read_packet(conn.reader, front.max_packet_bytes)) is not None:
                await conn._packet(packet)
        except (Hangup, mp.PacketProblem, ChannelGone, Flooded, asyncio.IncompleteReadError):
            pass
        for channel in front.channels:
            assert channel.queue.qsize() <= 8

    virtual(connection())


# --- UDP ------------------------------------------------------------------------------------------------

KEY, NONCE = bytes(range(16)), bytes([1, 0, 0, 0, 0, 0, 0, 42]) + bytes(8)


@FUZZ
@given(st.binary(max_size=80))
def test_any_datagram_opens_as_a_packet_or_is_a_packet_error(data: bytes) -> None:
    with contextlib.suppress(PacketError):
        PacketCrypto(KEY, NONCE).open(data)


@FUZZ
@given(st.lists(st.integers(0, 0xFFFFFFFF) | st.integers(0, 400), max_size=60))
def test_the_sequence_check_counts_every_packet_once_and_keeps_a_window(sequences: list[int]) -> None:
    check = SequenceCheck()
    for sequence in sequences:
        check.accept(sequence)
        assert check._missing.bit_length() <= WINDOW
    assert check.received + check.late + check.duplicate + check.stale + check.implausible == len(sequences)
    assert check.lost >= 0


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.integers(0, 0xFFFFFFFF),
            st.binary(max_size=20),
            st.sampled_from([("192.0.2.1", 5000), ("198.51.100.9", 6000)]),
            st.booleans(),
        ),
        max_size=40,
    )
)
def test_a_sessions_channel_takes_any_datagrams_and_holds_at_most_its_queue(
    datagrams: list[tuple[int, bytes, tuple[str, int], bool]],
) -> None:
    async def feed() -> None:
        clock = VirtualClock()
        front = _Front(clock)

        async def publish(message: Any) -> None:
            pass

        channel = MqttUdpChannel(front, publish, "d", FloodGuard(FloodSettings(), clock), clock, queue_limit=8)
        device = PacketCrypto(channel.crypto.key, channel.crypto.nonce)
        for sequence, payload, address, whole in datagrams:
            datagram = device.seal(payload, 0, sequence)
            channel.datagram(datagram if whole else datagram[: HEADER.size + len(payload) // 2], address)
            assert channel.queue.qsize() <= 8

    virtual(feed())


# --- OTA and the speech services ------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()) | st.just(b"[" * 5000))
def test_any_ota_body_is_system_information_or_a_refusal(raw: bytes) -> None:
    assert isinstance(system_info(raw), ota.OtaRequest | str)


# --- MCP payloads and OTA answers ---------------------------------------------------------------------------

MCP_KEYS = ("jsonrpc", "id", "method", "params", "result", "error")
PARAM_KEYS = ("name", "arguments", "cursor")
RESULT_KEYS = ("tools", "nextCursor", "content", "isError", "protocolVersion")
OTA_KEYS = (
    "endpoint",
    "client_id",
    "username",
    "password",
    "port",
    "keepalive",
    "url",
    "token",
    "timestamp",
    "version",
)
mcp_shaped = st.dictionaries(st.sampled_from(MCP_KEYS), json_values, max_size=5) | st.builds(
    lambda method, fields: {"jsonrpc": "2.0", "id": 1, "method": method, **fields},
    st.sampled_from((mcp.INITIALIZE, mcp.TOOLS_LIST, mcp.TOOLS_CALL)) | st.text(max_size=10),
    st.dictionaries(st.just("params"), json_values | st.dictionaries(st.sampled_from(PARAM_KEYS), json_values)),
)  # fmt: skip
mcp_results = st.builds(
    lambda result: {"jsonrpc": "2.0", "id": 1, "result": result},
    json_values | st.dictionaries(st.sampled_from(RESULT_KEYS), json_values),
)  # fmt: skip


@FUZZ
@given(json_values | mcp_shaped | mcp_results)
def test_any_json_as_an_mcp_payload_is_typed_or_not_json_rpc_at_both_ends(value: Any) -> None:
    message = decode(msgspec.json.encode({"type": "mcp", "payload": value}))  # JSON: an infinity is null
    assert isinstance(message, Mcp)
    payload = message.payload
    assert isinstance(payload, mcp.Request | mcp.Notification | mcp.Result | mcp.Error | mcp.NotJsonRpc)
    if isinstance(payload, mcp.Result):  # what the server reads of an answer, as each method it asked
        for read_as in (mcp.initialize_result, mcp.list_result, mcp.call_result):
            assert isinstance(read_as(payload), mcp.InitializeResult | mcp.ListResult | mcp.CallResult | mcp.NotJsonRpc)
    answer = EmulatedTools().handle(payload)  # the device answers it, or answers nothing
    if answer is not None:
        assert isinstance(decode(encode(Mcp(payload=answer))), Mcp)


ota_sections = st.dictionaries(
    st.sampled_from(("server_time", "firmware", "activation", "mqtt", "websocket")),
    json_values
    | st.dictionaries(
        st.sampled_from(OTA_KEYS),
        json_values,
    ),
)  # fmt: skip


@FUZZ
@given(json_values | ota_sections)
def test_any_json_as_an_ota_answer_is_an_answer_or_a_refusal_naming_what(value: Any) -> None:
    try:
        answer = ota.read_answer(msgspec.json.encode(value))
    except ota.OtaAnswerError as exc:
        assert "the OTA's answer" in str(exc)
        return
    assert isinstance(answer, ota.OtaAnswer)
    if isinstance(answer.mqtt, ota.MqttSection):
        mqtt_identity.MqttConfig.of(answer.mqtt).host_port()


@FUZZ
@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()) | st.just(b"{" * 5000))
def test_any_speech_request_body_is_a_request_or_an_api_error(raw: bytes) -> None:
    with contextlib.suppress(ApiError):
        forms.speech(forms.json_body(raw))
    assert isinstance(_request_attributes(raw), dict)  # the LLM relay reads a caller's body the same way


@FUZZ
@given(st.dictionaries(st.sampled_from(("file", "model", "language", "prompt", "temperature", "response_format")),
                       scalars | st.binary(max_size=30)))  # fmt: skip
def test_any_transcription_form_is_a_request_or_an_api_error(fields: dict[str, Any]) -> None:
    form = {
        k: web.FileField(k, "a.wav", io.BufferedReader(io.BytesIO(v)), "audio/wav", CIMultiDict())  # type: ignore[arg-type]
        if isinstance(v, bytes)
        else v
        for k, v in fields.items()
    }
    with contextlib.suppress(ApiError):
        forms.transcription(form)


@FUZZ
@given(st.binary(max_size=300) | st.builds(lambda tail: b"RIFF" + tail, st.binary(max_size=200)))
def test_any_upload_decodes_to_audio_or_is_refused_as_not_audio(data: bytes) -> None:
    with contextlib.suppress(bodies.NotAudio, bodies.NoSamples, bodies.TooLong):
        bodies.decode(data)


def test_the_fuzzers_reach_what_they_claim() -> None:
    """Controls: the strategies make both the real thing and garbage, so a pass is not an empty fuzz."""
    assert isinstance(read(dump(hello())), Message)
    assert isinstance(read("{"), Malformed)
    assert isinstance(from_websocket(3, framing.pack(3, b"\xf8\xff\xfe")), Audio)
    tools_list = decode(dump({"type": "mcp", "payload": {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}}))
    assert isinstance(tools_list, Mcp) and isinstance(EmulatedTools().handle(tools_list.payload), mcp.Result)
    assert isinstance(mcp.read(b"[]"), mcp.NotJsonRpc)
    assert isinstance(ota.read_answer('{"websocket": {"url": "ws://h/"}}').websocket, ota.WebsocketSection)
