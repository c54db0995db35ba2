"""The device a server URL names: a xiaozhi device (``ws://``, ``wss://``, ``mqtt://``, an OTA URL) or a telephony
caller (``twilio+ws://``, ``twilio+wss://``), each held with ``async with`` and asked with ``turn``."""

from __future__ import annotations

from pipeline.clock import Clock
from pipeline.transport.device.device import EmulatedDevice
from pipeline.transport.device.device_recording import RecordTo
from pipeline.transport.device.device_settings import DeviceSettings
from pipeline.transport.device.phone_device import PhoneCaller, is_phone

AnyDevice = EmulatedDevice | PhoneCaller


def device_for(settings: DeviceSettings, clock: Clock, record: RecordTo | None = None) -> AnyDevice:
    """The device for ``settings.url``, not yet connected; a ``ValueError`` for settings it cannot use."""
    if not is_phone(settings.url):
        return EmulatedDevice(settings, clock, record)
    return PhoneCaller(settings, clock, record)
