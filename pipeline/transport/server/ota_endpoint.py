"""The xiaozhi OTA endpoint (``/xiaozhi/ota/``): where a stock device learns which server to talk to.

At boot a firmware POSTs its system information (``Device-Id``, ``Client-Id`` headers, a JSON
body naming its application version) to its configured OTA URL, and takes from the JSON answer
the server time, whether a firmware update is offered, and its protocol: with a ``websocket``
section (``url``, ``token``) it connects there over WebSocket (firmware ``main/ota.cc``
``CheckVersion``, ``application.cc`` ``InitializeProtocol``). This endpoint answers as
xiaozhi-esp32-server's does (``core/api/ota_handler.py`` ``handle_post``): no update (the
device's own version echoed, no URL), and either the lab's WebSocket URL and bearer token or, when
the lab's MQTT front end runs, the ``mqtt`` section the xiaozhi MQTT gateway's OTA gives
(``generateMqttConfig``: endpoint, a client id from the request's Device-Id and Client-Id, a username
naming the device's IP, the password signed with the front end's key, the topics), never both, as the
real server. A GET, which a person sends to check the endpoint, is told the WebSocket URL in a line of
text and no credential, as the real server tells it. Like the real server, it gives credentials to
whatever Device-Id asks, unless ``DoorSettings.allowed_devices`` lists the devices that may have
them (403 for any other); with MQTT that is the device's signed password, so the front end's
``duplicate_connect`` decides whether a second device with it may take the first one's session.

The answer carries a device's credentials, so no other web page may read it: the lab sends no
``Access-Control-Allow-Origin`` unless one origin is named (``cors_origin``). The real server allows
every origin (``base_handler.py``), which lets any page a user opens read a lab's token off localhost.
Nor may a page rebind its own name to this machine and read the answer as its own (DNS rebinding): a
request whose Host is not this server's, or whose Origin is a foreign page's, is refused with 403
(``origins`` has the rule; devices send no Origin).

It is served over HTTP by aiohttp on a port of its own, as the real server serves it beside its
WebSocket port: websockets' HTTP parser takes only GET requests without a body. Its connections keep
``DoorSettings.http``'s limits (``endpoints.doors``): a connection waiting for a request is closed after
``idle_s`` (aiohttp's default is an hour), a body must come within it, and at the cap a newcomer closes
the connection that has waited longest; refusals are said once with a count.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import urlsplit

from aiohttp import web
from msgspec import UNSET

from pipeline.clock import Clock
from pipeline.endpoints.doors import HttpDoor, serve_app
from pipeline.endpoints.repeats import Repeats
from pipeline.transport.server.origins import host_allowed, host_name, origin_allowed
from pipeline.transport.server.server_settings import DoorSettings
from pipeline.transport.wire import mqtt_identity, ota

OTA_PATH = "/xiaozhi/ota/"
UNKNOWN_VERSION = "0.0.0"  # what the real server echoes when a device names no version
MAX_BODY_BYTES = 64 * 1024  # a firmware's system information is 1-2 KiB
# the headers a page of the named origin may send, as the real server allows (core/api/base_handler.py)
CORS_HEADERS = "client-id, content-type, device-id, authorization"


class OtaError(RuntimeError):
    """The endpoint could not be served: its port is taken, or the address is not this machine's."""


@dataclass(frozen=True, slots=True)
class OtaSettings:
    """What the OTA endpoint tells devices (where to connect, with which credential) and where it listens."""

    websocket_url: str  # what devices are told to connect to: ws://PUBLIC_HOST:PORT/xiaozhi/v1/
    host: str = "127.0.0.1"
    port: int = 8003  # the real server's http_port
    token: str = field(default="", repr=False)  # the WebSocket bearer token: the device's credential
    timezone_offset_min: int = 0  # added by firmware to server_time.timestamp to set its local clock
    mqtt_endpoint: str = ""  # HOST:PORT of the lab's MQTT front end; "": no mqtt section
    mqtt_signature_key: str = field(default="", repr=False)  # signs each device's password; "": none checked
    mqtt_group: str = mqtt_identity.GROUP
    cors_origin: str = ""  # the one web origin that may read answers (a console of the user's); "": none
    door: DoorSettings = field(default_factory=DoorSettings)  # who is given credentials; which Host and Origin

    def told_hosts(self) -> tuple[str, ...]:
        """The addresses devices are given: the WebSocket URL's host and the MQTT endpoint's."""
        told = [urlsplit(self.websocket_url).netloc]
        if self.mqtt_endpoint:
            told.append(self.mqtt_endpoint)
        return tuple(host_name(netloc) for netloc in told)


def server_url(host: str, port: int, path: str, scheme: str = "ws") -> str:
    """``SCHEME://HOST:PORT/PATH``, an IPv6 address in brackets."""
    netloc = f"[{host}]" if ":" in host else host
    return f"{scheme}://{netloc}:{port}{path}"


class OtaServer:
    """The endpoint on its own HTTP port; ``async with`` runs it, ``port`` is the one bound."""

    def __init__(self, settings: OtaSettings, clock: Clock, note: Callable[[str], None] | None = None) -> None:
        self.settings, self.clock = settings, clock
        self.note = note or (lambda _message: None)
        # a refusal said once per kind, then as a count: a flood of them is a few lines
        self.refusals = Repeats(self.note, now=lambda: clock.now_ns() / 1e9)
        self.cors = _cors(settings.cors_origin)
        self.port = settings.port
        self._runner: web.AppRunner | None = None
        self.door: HttpDoor | None = None  # its connections, once it serves

    async def __aenter__(self) -> OtaServer:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._ours])
        for path in (OTA_PATH, OTA_PATH.rstrip("/")):  # with or without the trailing slash a user typed
            app.router.add_post(path, self._post)
            app.router.add_get(path, self._get)
            app.router.add_route("OPTIONS", path, self._options)
        s = self.settings
        try:
            self._runner, self.door = await serve_app(app, s.host, s.port, s.door.http, self.note)
        except OSError as exc:
            raise OtaError(f"cannot serve OTA on {s.host}:{s.port}: {exc.strerror or exc}") from None
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self.refusals.flush()

    @web.middleware
    async def _ours(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """A request naming another Host (a rebinding page's) or a foreign page's Origin is refused (403)."""
        s, door = self.settings, self.settings.door
        host, origin = request.headers.get("Host"), request.headers.get("Origin")
        if not host_allowed(host, s.host, s.told_hosts(), door.allowed_hosts):
            self.refusals.say("host", f"OTA: a request for Host {host!r} refused (allowed_hosts)")
            return web.Response(status=HTTPStatus.FORBIDDEN, text=f"Host {host} is not this server (allowed_hosts)\n")
        if not origin_allowed(origin, tuple(o for o in (*door.allowed_origins, s.cors_origin) if o)):
            self.refusals.say("origin", f"OTA: a request from the web origin {origin!r} refused (allowed_origins)")
            return web.Response(status=HTTPStatus.FORBIDDEN, text=f"the web origin {origin} may not call this server\n")
        return await handler(request)

    async def _post(self, request: web.Request) -> web.Response:
        missing = [name for name in ("Device-Id", "Client-Id") if not request.headers.get(name)]
        if missing:  # the real server refuses these too (ota_handler.py handle_post)
            return self._refusal(f"the {' and '.join(missing)} header(s) are missing")
        device = f"{request.headers['Device-Id']} (client {request.headers['Client-Id']})"
        if not self.settings.door.admits(request.headers["Device-Id"]):
            self.refusals.say("device", f"OTA: {device} is not an allowed device: no credentials given")
            return self._refusal(f"device {request.headers['Device-Id']} is not allowed here", HTTPStatus.FORBIDDEN)
        try:
            async with asyncio.timeout(self.settings.door.http.idle_s):  # a body sent byte by byte holds a socket
                raw = await request.read()
        except TimeoutError:
            return self._refusal("the request's body did not come in time", HTTPStatus.REQUEST_TIMEOUT)
        body = system_info(raw)
        if isinstance(body, str):
            return self._refusal(body)
        told = f"mqtt {self.settings.mqtt_endpoint}" if self.mqtt else self.settings.websocket_url
        self.note(f"OTA: {device} is told {told}")
        return self._answer(body.application.version or UNKNOWN_VERSION, self._mqtt_section(request))

    async def _get(self, request: web.Request) -> web.Response:
        """A person checking the endpoint: a line of text as the real server's (ota_handler.py handle_get),
        naming where devices are sent and no credential."""
        text = f"OTA接口运行正常，向设备发送的websocket地址是：{self.settings.websocket_url}"
        return web.Response(text=text, headers=self.cors)

    @property
    def mqtt(self) -> bool:
        return bool(self.settings.mqtt_endpoint)

    def _mqtt_section(self, request: web.Request) -> ota.MqttSection | None:
        """The device's MQTT credentials, from its Device-Id and Client-Id headers; none without them."""
        mac, uuid = request.headers.get("Device-Id", ""), request.headers.get("Client-Id", "")
        if not self.mqtt or not mac or not uuid:
            return None
        s = self.settings
        user_data = {"ip": request.remote or ""}  # what the gateway's OTA puts there: the device's address
        config = mqtt_identity.device_config(s.mqtt_endpoint, mac, uuid, s.mqtt_signature_key, s.mqtt_group, user_data)
        return config.section(int(s.mqtt_endpoint.rpartition(":")[2]))

    async def _options(self, request: web.Request) -> web.Response:
        methods = {"Access-Control-Allow-Methods": "GET, POST, OPTIONS"} if self.cors else {}
        return web.Response(headers={**self.cors, **methods})

    def _answer(self, version: str, mqtt: ota.MqttSection | None = None) -> web.Response:
        s = self.settings
        answer = ota.OtaAnswer(
            server_time=ota.ServerTime(
                timestamp=self.clock.now_ns() // 1_000_000, timezone_offset=s.timezone_offset_min
            ),
            firmware=ota.Firmware(version=version, url=""),  # the device's own version: no update offered
            # one protocol or the other, as the real server (ota_handler.py handle_post)
            mqtt=UNSET if mqtt is None else mqtt,
            websocket=ota.WebsocketSection(url=s.websocket_url, token=s.token) if mqtt is None else UNSET,
        )
        return self._json(answer)

    def _refusal(self, message: str, status: int = HTTPStatus.BAD_REQUEST) -> web.Response:
        return self._json(ota.OtaRefusal(message=message), status)

    def _json(self, value: ota.OtaAnswer | ota.OtaRefusal, status: int = HTTPStatus.OK) -> web.Response:
        body = ota.encode(value)
        return web.Response(
            body=body, status=status, content_type="application/json", charset="utf-8", headers=self.cors
        )


def system_info(raw: bytes) -> ota.OtaRequest | str:
    """A device's system information (its POST body), or what is wrong with it; an empty body is none."""
    return ota.read_request(raw)


def _cors(origin: str) -> dict[str, str]:
    """The CORS headers for the one origin allowed to read answers; none when none is."""
    if not origin:
        return {}
    return {
        "Access-Control-Allow-Headers": CORS_HEADERS,
        "Access-Control-Allow-Credentials": "true",
        "Access-Control-Allow-Origin": origin,
        "Vary": "Origin",
    }
