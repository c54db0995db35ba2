"""How the lab's server treats devices: each behaviour of xiaozhi-esp32-server a named setting, the real one by default.

Every field can change what a device hears or when, so every field enters config_id (``describe``).
Where the lab differs from the real server on purpose, the field says so and names the real value.
The real server's sources are under ``main/xiaozhi-server/`` of xinnan-tech/xiaozhi-esp32-server.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from pipeline.endpoints.doors import HttpLimits, descriptor_share

# config.yaml wakeup_words: the real server's eleven defaults
WAKE_WORDS = (
    "你好小智",
    "嘿你好呀",
    "你好小志",
    "小爱同学",
    "你好小鑫",
    "你好小新",
    "小美同学",
    "小龙小龙",
    "喵喵同学",
    "小滨小滨",
    "小冰小冰",
)
# config.yaml end_prompt.prompt: what the LLM is asked when a device has been quiet too long
END_PROMPT = '请你以"时间过得真快"未来头，用富有感情、依依不舍的话来结束这场对话吧！'
AUTO_LISTENING = ("continuous", "per-listen")
DUPLICATE_CONNECT = ("refuse", "replace")


@dataclass(frozen=True, slots=True)
class FloodSettings:
    """What one connection may send. The real server has no limit; the lab's tells a backlog from a flood.

    Audio is metered in audio time: a device cannot record faster than real time, so over any stretch
    it sends at most that stretch's audio plus what a stall held back (``max_backlog_s``); more is a
    flood. Control messages are metered by count. Both buckets start full; a connection that empties
    either is closed with 1008 and the reason."""

    max_backlog_s: float = 30.0  # audio a device may send ahead of real time after a stall; 0: not metered
    max_control_per_s: float = 20.0  # control messages a second, on average; 0: not metered
    control_burst: int = 200  # control messages at once

    def __post_init__(self) -> None:
        if self.max_backlog_s < 0 or self.max_control_per_s < 0 or self.control_burst < 1:
            raise ValueError("flood limits: max_backlog_s and max_control_per_s >= 0, control_burst >= 1")


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """One device session's behaviour (``session.DeviceSession``)."""

    hello_timeout_s: float = 10.0  # the lab wants a hello first; the real server takes any message first
    # per turn, counted from speech; the real server has none (a turn that never ends is recorded as timeout)
    turn_timeout_s: float = 60.0
    pacing: str = "xiaozhi-server"  # downlink pacing (pacing.PACINGS); "lab-v1" is the lab's pacing before it
    downlink_codec: str = "xiaozhi-server"  # the answer's Opus preset (wire.opus.PRESETS): 24 kHz, as the real one
    # continuous: as the real server, the VAD hears every frame in auto mode, so speech after an end-point is a
    # new utterance (receiveAudioHandle.py); per-listen: the lab before, one utterance per listen start
    auto_listening: str = "continuous"
    wake_words: tuple[str, ...] = WAKE_WORDS
    greeting: bool = True  # enable_greeting: a wake word is answered (False: stt, tts start, tts stop)
    # enable_wakeup_words_response_cache: the answer is a cached reply, no stt and no LLM (helloHandle.py)
    wake_reply_cache: bool = True
    wake_reply: str = "我在这里哦！"  # the cached reply's text (the real server's built-in one)
    wake_chat_text: str = "嘿，你好呀"  # what the LLM is asked on a wake word when the cache is off
    wake_mute_s: float = 2.0  # audio ignored this long from the first frame after a wake or typed text
    # close_connection_no_voice_time: no voice this long while audio comes, and the LLM says goodbye; 0: never
    idle_goodbye_s: float = 120.0
    end_prompt: str = END_PROMPT
    # no audio at all this long (close_connection_no_voice_time + 60, checked every 10 s): closed; 0: never
    idle_close_s: float = 180.0
    flood: FloodSettings = field(default_factory=FloodSettings)

    def __post_init__(self) -> None:
        if self.auto_listening not in AUTO_LISTENING:
            raise ValueError(f"auto_listening {self.auto_listening!r}: one of {', '.join(AUTO_LISTENING)}")
        for name in ("hello_timeout_s", "turn_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        for name in ("wake_mute_s", "idle_goodbye_s", "idle_close_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more")


@dataclass(frozen=True, slots=True)
class DoorSettings:
    """What a front door (WebSocket, MQTT, OTA) lets in, how long it waits for a device that stops reading or never
    gets through its handshake."""

    max_connections: int = 2000  # open connections at once; more are refused (WebSocket 503, MQTT CONNACK 3)
    max_per_address: int = 500  # from one IP address; 0: no limit
    write_timeout_s: float = 10.0  # a send that cannot go out this long closes the connection
    max_idle_s: float = 300.0  # MQTT: a connection whose CONNECT asked for no keep-alive is closed after this
    # the Device-Ids (MACs) the OTA gives credentials to and the doors let in; (): any, as the real server's OTA
    # signs for any Device-Id (ota_handler.py handle_post; its auth.allowed_devices only spares a device the token)
    allowed_devices: tuple[str, ...] = ()
    # MQTT, a CONNECT with the client id of a connected device: refuse (CONNACK 2; the connected one keeps its
    # session) or replace (the connected one is dropped, as the gateway does, app.js addConnection, and MQTT 3.1.1
    # asks, MQTT-3.1.4-2). Said either way. Whoever got a device's credentials could otherwise take its session
    duplicate_connect: str = "refuse"
    # Host names the OTA answers besides loopback, the address it binds and the one devices are told (DNS rebinding,
    # origins.py); a DNS name devices are given must be listed; "*": any, as the real server
    allowed_hosts: tuple[str, ...] = ()
    # web origins (scheme://host[:port]) that may call the OTA or open a WebSocket besides pages of this machine; a
    # request without Origin, as devices send, always may; "*": any, as the real server
    allowed_origins: tuple[str, ...] = ()
    # connections not through their handshake yet (a WebSocket upgrade, an MQTT CONNECT) at once; past it, the one
    # that has waited longest is closed (endpoints.doors); 0: half the process's descriptor limit
    max_waiting: int = 0
    handshake_timeout_s: float = 10.0  # WebSocket: the upgrade must be done by then (websockets' open_timeout)
    http: HttpLimits = field(default_factory=HttpLimits)  # the OTA endpoint's HTTP connections

    def __post_init__(self) -> None:
        if self.max_connections < 1 or self.max_per_address < 0:
            raise ValueError("max_connections >= 1 and max_per_address >= 0")
        if self.write_timeout_s <= 0 or self.max_idle_s <= 0 or self.handshake_timeout_s <= 0:
            raise ValueError("write_timeout_s, max_idle_s and handshake_timeout_s must be positive")
        if self.max_waiting < 0:
            raise ValueError("max_waiting >= 0")
        if self.duplicate_connect not in DUPLICATE_CONNECT:
            raise ValueError(f"duplicate_connect {self.duplicate_connect!r}: one of {', '.join(DUPLICATE_CONNECT)}")

    def waiting_cap(self) -> int:
        return self.max_waiting or descriptor_share()

    def admits(self, device_id: str) -> bool:
        """Whether a device of this Device-Id (a MAC in any case, colons or underscores) may have credentials."""
        return not self.allowed_devices or _mac_key(device_id) in {_mac_key(d) for d in self.allowed_devices}


def _mac_key(device_id: str) -> str:
    return device_id.strip().lower().replace("_", ":")


def describe(session: SessionSettings, door: DoorSettings | None = None, processes: int = 1) -> str:
    """Every setting as ``name=value``, for config_id and the traces: two servers that differ in one differ here
    (``processes``: one of N processes sharing the port, named only when N > 1, so one process's ids stay)."""
    fields = dataclasses.asdict(session)
    if door is not None:
        fields["door"] = dataclasses.asdict(door)
    if processes > 1:
        fields["processes"] = processes
    return ", ".join(f"{name}={value}" for name, value in fields.items())
