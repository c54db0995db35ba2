"""The device's OTA request, as the firmware makes it at boot (``ota.cc`` ``CheckVersion``), read with bounds.

The answer says where the MQTT gateway is. A hostile or broken OTA endpoint may answer with
anything: the answer is read up to ``DownlinkLimits.max_ota_bytes`` (a longer one is refused
without reading the rest) and its nesting is measured before it is decoded, so neither a huge nor
a deeply nested answer costs the device more than the cap, and every refusal is a ``DeviceError``
that says what was wrong.
"""

from __future__ import annotations

import re

import aiohttp
import numpy as np
from msgspec import UnsetType

from pipeline.transport.device.device_settings import LinkSettings
from pipeline.transport.device.link import DeviceError
from pipeline.transport.wire import ota
from pipeline.transport.wire.mqtt_identity import MqttConfig

OTA_APP_VERSION = "1.6.0"  # the application version the emulator tells an OTA endpoint it runs
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)  # a JSON string, escapes included: its brackets are text
_OPEN, _CLOSE = np.frombuffer(b"[{", np.uint8), np.frombuffer(b"]}", np.uint8)


def json_depth(data: bytes) -> int:
    """How deep ``data``'s arrays and objects nest (0: a scalar), counted in one pass without parsing it;
    brackets inside strings do not count. Malformed JSON gets some number: the decoder refuses it after."""
    codes = np.frombuffer(_STRING.sub(b'""', data), np.uint8)
    steps = np.isin(codes, _OPEN).astype(np.int32) - np.isin(codes, _CLOSE).astype(np.int32)
    return int(np.cumsum(steps).max(initial=0))


async def mqtt_config(settings: LinkSettings) -> MqttConfig:
    """The ``mqtt`` section of the OTA's answer to this device; a ``DeviceError`` saying why there is none."""
    headers = {"Device-Id": settings.device_id, "Client-Id": settings.client_id, "Content-Type": "application/json"}
    application = ota.Application(name="xiaozhi", version=OTA_APP_VERSION)
    request = ota.OtaRequest(application=application, mac_address=settings.device_id, uuid=settings.client_id)
    async with (
        aiohttp.ClientSession() as http,
        http.post(settings.url, data=ota.encode(request), headers=headers) as response,
    ):
        if response.status != 200:
            raise DeviceError(f"{settings.url}: the OTA answered HTTP {response.status}")
        answer = read_answer(settings, await _body(settings, response))
    if isinstance(answer.mqtt, UnsetType):
        told = answer.websocket.url if isinstance(answer.websocket, ota.WebsocketSection) else ""
        hint = f"; it offers WebSocket: --server {told}" if told else ""
        raise DeviceError(f"{settings.url}: the OTA's answer has no mqtt section{hint}")
    return MqttConfig.of(answer.mqtt)


async def _body(settings: LinkSettings, response: aiohttp.ClientResponse) -> bytes:
    """The answer's body, or a ``DeviceError`` as soon as it is known to be longer than the cap."""
    cap = settings.limits.max_ota_bytes
    too_long = DeviceError(f"{settings.url}: the OTA's answer is longer than {cap} bytes")
    if response.content_length is not None and response.content_length > cap:
        raise too_long
    body = bytearray()
    async for chunk in response.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > cap:
            raise too_long
    return bytes(body)


def read_answer(settings: LinkSettings, body: bytes) -> ota.OtaAnswer:
    """The answer ``body`` holds, nested no deeper than the cap; a ``DeviceError`` naming what is wrong."""
    depth, cap = json_depth(body), settings.limits.max_ota_depth
    if depth > cap:
        raise DeviceError(f"{settings.url}: the OTA's answer nests {depth} deep (more than {cap})")
    try:
        return ota.read_answer(body)
    except ota.OtaAnswerError as exc:
        raise DeviceError(f"{settings.url}: {exc}") from None
