"""What devices are told: the address they reach this machine at, and the OTA endpoint's answer once the
WebSocket port is known (``--port 0`` takes one when the server listens)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.transport.server.mqtt_front import is_wildcard
from pipeline.transport.server.ota_endpoint import OtaSettings, server_url
from pipeline.transport.server.websocket import WebSocketSettings


@dataclass(frozen=True, slots=True)
class OtaFront:
    """What the OTA endpoint is told by the command line; the WebSocket URL waits for its port (``--port 0``)."""

    public_host: str
    port: int
    token: str = field(default="", repr=False)
    note: Callable[[str], None] = print
    cors_origin: str = ""  # the one web origin that may read the answers; "": none

    def settings(self, ws: WebSocketSettings, ws_port: int, mqtt_endpoint: str = "", mqtt_key: str = "") -> OtaSettings:
        offset_min = (time.localtime().tm_gmtoff or 0) // 60  # a device shows the lab machine's local time
        url = server_url(self.public_host, ws_port, ws.path)
        return OtaSettings(
            url,
            ws.host,
            self.port,
            self.token,
            offset_min,
            mqtt_endpoint,
            mqtt_key,
            cors_origin=self.cors_origin,
            door=ws.door,  # the devices, hosts and origins the doors let in are the OTA's too
        )


def public_host(host: str, public: str, advertised: bool) -> str:
    """The address devices are told; a wildcard bind address is refused when something must be told."""
    if public and is_wildcard(public):
        raise ValueError(f"--public-host {public}: devices cannot send to a wildcard address; give this machine's")
    chosen = public or host
    if advertised and is_wildcard(chosen):
        raise ValueError(
            f"--host {host} binds every address, and devices must be told one: "
            "give --public-host with the address devices reach this machine at (its LAN IP or name)"
        )
    return chosen
