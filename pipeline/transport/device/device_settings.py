"""How an emulated device behaves and reaches its server (``DeviceSettings``, ``LinkSettings``).

Kept apart from the device itself so that a command line can offer the choices without loading
any transport library.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipeline.transport.wire.messages import LISTEN_MODES

if TYPE_CHECKING:  # a command line offering these choices loads no network library
    from pipeline.endpoints.link.profiles import NetProfile

# wake: the wake word while Speaking; button: the talk button while Speaking; speech: the user just
# starts speaking the next question
BARGE_IN_WAYS = ("wake", "button", "speech")


@dataclass(frozen=True, slots=True)
class SoundOutputs:
    """Where a device's sound goes: PortAudio output names (sounddevice's); "" for none."""

    speaker: str = ""  # the answer, as the device plays it
    voice: str = ""  # the question, as its user says it

    def __bool__(self) -> bool:
        return bool(self.speaker or self.voice)


@dataclass(frozen=True, slots=True)
class DownlinkLimits:
    """What a device takes from its server before it calls the server hostile and hangs up: the server's
    flood limits turned round (``downlink_guard``), a size cap on each message and on the OTA's answer,
    and a cap on what waits unread for the next turn. No server of the lab's or the real one comes near
    them; they bound the device's memory whatever a server sends."""

    max_backlog_s: float = 30.0  # audio a server may send ahead of real time (a stall's backlog); 0: not metered
    max_control_per_s: float = 20.0  # control messages a second, on average; 0: not metered
    control_burst: int = 200  # control messages at once
    max_message_bytes: int = 2**20  # one WebSocket message or MQTT packet: websockets' default, as the real server runs
    max_waiting: int = 4096  # things the server sent that no turn has read yet (60 ms audio: over 4 minutes)
    max_waiting_bytes: int = 8 * 2**20  # their bytes
    # the OTA's answer: a real one is under 1 KiB and nests 2 deep (the firmware's cJSON stops at 1,000,
    # CJSON_NESTING_LIMIT); checked before decoding, so no reader of it ever needs a deep stack
    max_ota_bytes: int = 64 * 1024
    max_ota_depth: int = 32

    def __post_init__(self) -> None:
        if self.max_backlog_s < 0 or self.max_control_per_s < 0 or self.control_burst < 1:
            raise ValueError("downlink limits: max_backlog_s and max_control_per_s >= 0, control_burst >= 1")
        if min(self.max_message_bytes, self.max_waiting, self.max_waiting_bytes, self.max_ota_bytes) < 1:
            raise ValueError("downlink limits: the size caps must be positive")
        if self.max_ota_depth < 2:
            raise ValueError("downlink limits: max_ota_depth >= 2 (the OTA's answer nests 2 deep)")


@dataclass(frozen=True, slots=True)
class Backoff:
    """When a device whose connection was lost tries its server again: the first try at once (the next
    question's wake opens the channel, application.cc:727-733 and 743-760), then after ``first_s``, growing
    by ``factor`` after each failure, ``tries`` in all; never starting a try more than ``give_up_s`` after
    the first, after which the question is a failed row (``disconnected``) and the next one starts over."""

    first_s: float = 10.0
    factor: float = 2.0
    tries: int = 10
    give_up_s: float = 300.0  # the lab's: the firmware waits for its user, a run cannot wait for ever

    def __post_init__(self) -> None:
        if self.first_s < 0 or self.factor < 1 or self.tries < 1 or self.give_up_s < 0:
            raise ValueError("backoff: first_s >= 0, factor >= 1, tries >= 1, give_up_s >= 0")

    def delays_s(self) -> list[float]:
        """The wait before each try, the first 0, cut where the tries would go past ``give_up_s``."""
        delays, waited = [0.0], 0.0
        for k in range(1, self.tries):
            delay = self.first_s * self.factor ** (k - 1)
            if waited + delay > self.give_up_s:
                break
            delays.append(delay)
            waited += delay
        return delays


# The firmware's schedule for each transport, when a device lost its server (78/xiaozhi-esp32 at 4814202,
# 78/esp-ml307 at 7bc2fd6, espressif/esp-mqtt at 5a9ba05):
# - websocket: a wake opens the channel at once (main/application.cc:727-733, 743-760) and nothing retries
#   it when that fails: the failure is an error shown to the user (main/protocols/websocket_protocol.cc:161-172).
#   The one retry schedule the firmware has for a server it cannot reach is its boot check: 10 s, doubling,
#   10 tries, telling the user "will retry in N seconds" (main/application.cc:417-451); the emulated user
#   wakes the device again on it;
# - udp (MQTT): the MQTT client reconnects by itself every 10 s (esp-mqtt's default reconnect_timeout_ms,
#   MQTT_RECON_DEFAULT_MS: lib/include/mqtt_config.h:24, mqtt_client.c:625-628; esp-ml307 src/esp/esp_mqtt.cc:23-36
#   sets neither it nor disable_auto_reconnect), and a wake with no MQTT connection connects at once
#   (main/protocols/mqtt_protocol.cc:239-245); the protocol's own fresh client 60 s after a disconnect
#   (mqtt_protocol.cc:97-104, MQTT_RECONNECT_INTERVAL_MS in mqtt_protocol.h:22) comes after those.
FIRMWARE_BACKOFF = {"websocket": Backoff(10.0, 2.0, 10), "udp": Backoff(10.0, 1.0, 10)}


@dataclass(frozen=True, slots=True)
class DeviceSettings:
    """One emulated device: its server, its protocol, and what its user does."""

    url: str
    token: str = field(default="", repr=False)
    protocol_version: int = 1
    # auto: the server's VAD ends the turn; manual: the device sends listen stop; realtime: one listen
    # start per connection, the microphone never stops, each question announced by a lab message
    listen_mode: str = "auto"
    device_id: str = "02:00:00:00:00:01"
    client_id: str = ""  # "": stable per device id, as a board's UUID is
    mqtt_signature_key: str = field(default="", repr=False)  # an mqtt:// server's: signs the device's password
    # frames held before the first one of an answer plays; the firmware holds none (audio_service.cc)
    jitter_frames: int = 0
    tail_ms: int = 3000  # auto mode: noise floor streamed after the clip until the server says what it heard
    # after the question's last frame, the longest the server may say nothing: a real server sends nothing at
    # all for an utterance it did not recognise (0: wait the whole turn_timeout_s)
    answer_timeout_s: float = 10.0
    connect_timeout_s: float = 10.0
    turn_timeout_s: float = 60.0
    barge_in_after_ms: int | None = None  # the user cuts in this long after the answer became audible
    barge_in_with: str = "wake"  # one of BARGE_IN_WAYS
    # before each question, wait until the server has sent nothing for this long (0: ask at once): a server
    # still answering an earlier question (its second half, after it cut the user off) would answer into this one
    settle_ms: int = 0
    encoder_preset: str = "firmware"  # the uplink Opus encoder (pipeline.transport.wire.opus presets)
    mcp_wait_s: float = 3.0  # after hello: wait this long at most for the server's tools/list
    profile: NetProfile | None = None  # the link emulator between device and server; None: direct
    sound: SoundOutputs = field(
        default_factory=SoundOutputs
    )  # its speaker and its user's voice into sound devices; none: silent
    limits: DownlinkLimits = field(default_factory=DownlinkLimits)  # what it takes from a server
    backoff: Backoff | None = None  # after a lost connection; None: the firmware's for the transport (FIRMWARE_BACKOFF)

    def __post_init__(self) -> None:
        if self.listen_mode not in LISTEN_MODES:
            raise ValueError(f"listen_mode {self.listen_mode!r}: one of {', '.join(LISTEN_MODES)}")
        if self.barge_in_with not in BARGE_IN_WAYS:
            raise ValueError(f"barge_in_with {self.barge_in_with!r}: one of {', '.join(BARGE_IN_WAYS)}")
        if self.jitter_frames < 0:
            raise ValueError(f"jitter_frames {self.jitter_frames}: 0 or more")
        if self.settle_ms < 0:
            raise ValueError(f"settle_ms {self.settle_ms}: 0 or more")
        if self.sound.voice and self.listen_mode == "realtime":
            raise ValueError("a voice into a sound device needs listen_mode auto or manual (realtime: not yet)")

    def link(self) -> LinkSettings:
        """What the device's link needs of these settings."""
        return LinkSettings(
            self.url,
            self.token,
            self.protocol_version,
            self.device_id,
            self.connect_timeout_s,
            self.profile,
            self.client_id,
            mqtt_signature_key=self.mqtt_signature_key,
            limits=self.limits,
        )


def stable_client_id(device_id: str) -> str:
    """The device's Client-Id: the same on every connection (the firmware sends its board UUID, kept in
    NVS; xiaozhi-sdk derives it as uuid5 of the MAC), so a token issued for it keeps working."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, device_id))


@dataclass(frozen=True, slots=True)
class LinkSettings:
    """Where a device's link connects and how it says who it is."""

    url: str  # ws://HOST:PORT/xiaozhi/v1/, mqtt://HOST:PORT[/TOPIC] or an OTA URL (MqttUdpLink)
    token: str = field(default="", repr=False)
    protocol_version: int = 1  # WebSocket binary framing
    device_id: str = "02:00:00:00:00:01"
    connect_timeout_s: float = 10.0
    profile: NetProfile | None = None  # the link emulator between device and server (M14); None: direct
    client_id: str = ""  # "": stable_client_id(device_id)
    mqtt_signature_key: str = field(default="", repr=False)  # signs an mqtt:// device's password
    limits: DownlinkLimits = field(default_factory=DownlinkLimits)  # what the device takes from the server

    def __post_init__(self) -> None:
        if not self.client_id:
            object.__setattr__(self, "client_id", stable_client_id(self.device_id))
