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
