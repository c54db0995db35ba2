"""One MQTT + UDP session's channel with nothing around it, for the tests that forge datagrams at it: a front end
that records what the channel sends where, a clock the test moves, a session's first publish that goes nowhere."""

from __future__ import annotations

from typing import Any

from pipeline.transport.server.flood import FloodGuard
from pipeline.transport.server.mqtt_channel import MqttUdpChannel
from pipeline.transport.server.server_settings import FloodSettings

DEVICE_MAC = "02:00:00:00:00:01"
REBIND_S = 5.0  # a peer silent this long may move to a new address


class StepClock:
    """A clock the test moves by hand (``ns``)."""

    kind = "test"

    def __init__(self) -> None:
        self.ns = 0

    def now_ns(self) -> int:
        return self.ns


class RecordingFront:
    """The channel's front end: each datagram it sends, with where to, kept."""

    public_host, rejected_datagrams, udp_port = "127.0.0.1", 0, 9

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, tuple[str, int]]] = []

    def sendto(self, data: bytes, address: tuple[str, int]) -> None:
        self.sent.append((data, address))

    def forget(self, channel: MqttUdpChannel) -> None:
        pass


async def _publish(message: Any) -> None:
    pass


def channel() -> tuple[MqttUdpChannel, RecordingFront, StepClock]:
    """A fresh session's channel, its front end and its clock."""
    clock, front = StepClock(), RecordingFront()
    made = MqttUdpChannel(front, _publish, DEVICE_MAC, FloodGuard(FloodSettings(), clock), clock, REBIND_S)
    return made, front, clock
