"""Which Host and Origin a request to the lab's doors may name, so that no web page reaches a device's credentials.

A page a user opens can reach the lab's server in two ways CORS does not stop. It can open a WebSocket (a
browser asks no leave for that; it sends the page's Origin). And it can rebind its own name to 127.0.0.1 (DNS
rebinding): the browser then takes the server for the page's own origin and lets it read every answer, the
OTA's token and MQTT password included; only the Host header, the page's name, gives it away. So:

- **Host** (the OTA endpoint): a loopback name or address, the address the server binds, the address devices
  are told (the public host), or a name in ``DoorSettings.allowed_hosts``. A server binding every address
  (0.0.0.0, ::) takes any IP address too: devices reach it at whichever of its addresses they were given, and a
  rebinding page always names a name. A name devices are given (a DNS name in their OTA URL) must be listed.
- **Origin** (the OTA endpoint and the WebSocket door): none at all, as devices send none (firmware, py-xiaozhi,
  the emulator); a page of this machine (a loopback host); or one listed in ``DoorSettings.allowed_origins``.

The WebSocket door checks the Origin alone: every browser sends one with a WebSocket, and a device's Host is
whatever name its OTA answer gave it. The real server checks neither (``core/http_server.py``,
``core/websocket_server.py``). ``*`` in either list lets any in.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

ANY = "*"


def host_name(netloc: str) -> str:
    """The name or address of ``HOST[:PORT]`` (an IPv6 address in brackets), lower case, without a final dot."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        return netloc[1 : netloc.find("]")] if "]" in netloc else netloc
    name = netloc.rpartition(":")[0] if netloc.count(":") == 1 else netloc
    return name.rstrip(".")


def _address(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def is_loopback(name: str) -> bool:
    """localhost, a name under .localhost (RFC 6761: always this machine), or a loopback address."""
    address = _address(name)
    return name == "localhost" or name.endswith(".localhost") or (address is not None and address.is_loopback)


def host_allowed(header: str | None, bound: str, told: tuple[str, ...] = (), allowed: tuple[str, ...] = ()) -> bool:
    """Whether a request's Host header names this server (``bound``: the address it binds; ``told``: the addresses
    devices are given). No Host at all is no browser's request, so it passes."""
    if header is None or ANY in allowed:
        return True
    name = host_name(header)
    if is_loopback(name) or name in {host_name(h) for h in (bound, *told, *allowed) if h}:
        return True
    wildcard = _address(host_name(bound))
    return wildcard is not None and wildcard.is_unspecified and _address(name) is not None


def origin_allowed(origin: str | None, allowed: tuple[str, ...] = ()) -> bool:
    """Whether a request's Origin may come in: none (a device), a page of this machine, or a listed one."""
    if origin is None or ANY in allowed:
        return True
    if origin.strip().lower().rstrip("/") in {o.strip().lower().rstrip("/") for o in allowed}:
        return True
    parts = urlsplit(origin.strip())
    return parts.scheme in ("http", "https") and is_loopback(host_name(parts.netloc))
