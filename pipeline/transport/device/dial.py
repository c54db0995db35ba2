"""Which link a server URL names: ws:// or wss:// (WebSocket), mqtt:// or an http(s):// OTA URL (MQTT + UDP)."""

from __future__ import annotations

from urllib.parse import urlsplit

from pipeline.clock import Clock
from pipeline.transport.device.device_settings import LinkSettings
from pipeline.transport.device.link import DeviceLink
from pipeline.transport.device.mqtt_udp_link import MqttUdpLink
from pipeline.transport.device.websocket_link import WebSocketLink


def open_link(settings: LinkSettings, clock: Clock) -> DeviceLink:
    """The link for ``settings.url``, not yet connected; a ``ValueError`` for a URL no link speaks."""
    scheme = urlsplit(settings.url).scheme
    if scheme in ("ws", "wss"):
        return WebSocketLink(settings, clock)
    if scheme in ("mqtt", "http", "https"):
        return MqttUdpLink(settings, clock)
    raise ValueError(f"{settings.url!r}: a ws://, wss://, mqtt:// or http(s):// OTA URL is expected")
