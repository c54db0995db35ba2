"""One connection's guard against its server: audio metered in audio time, control messages by count.

The server's flood guard turned round (``server/flood.py`` holds the same two leaky buckets; the
device imports nothing of the server's side): a server may send an answer's audio no faster than
it plays plus ``max_backlog_s`` (what a stall held back, sent at once when the network comes
back), and at most ``control_burst`` control messages at once, ``max_control_per_s`` on average.
Audio is metered by what each Opus packet says it holds (its TOC byte, RFC 6716 3.1), read without
decoding it, so a packet the device never plays costs it as much as one it does. A server past
either limit is hostile: the link hangs up on it (``DownlinkFlood``). A text of the server's that a
turn keeps (``bounded``) is cut to ``MAX_TEXT_CHARS``.
"""

from __future__ import annotations

from pipeline.clock import Clock, LeakyBucket
from pipeline.transport.device.device_settings import DownlinkLimits

LONGEST_PACKET_MS = 120.0  # RFC 6716 3.2.5: what one packet can hold; an unreadable one is charged this
_SILK_MS = (10.0, 20.0, 40.0, 60.0)  # configurations 0-11, by config % 4
_HYBRID_MS = (10.0, 20.0)  # 12-15, by config % 2
_CELT_MS = (2.5, 5.0, 10.0, 20.0)  # 16-31, by config % 4
# the longest text of the server's a turn keeps (a transcript, a sentence): it goes to the traces and the
# rows, where a server's megabyte strings must not
MAX_TEXT_CHARS = 2000


class DownlinkFlood(Exception):
    """The server sent more than the device takes (``DownlinkLimits``); the text says what."""


def packet_ms(opus: bytes) -> float:
    """The audio an Opus packet holds, from its TOC byte (and frame count byte), in ms; an empty or
    unreadable packet counts as the most a packet can hold."""
    if not opus:
        return LONGEST_PACKET_MS
    config, code = opus[0] >> 3, opus[0] & 3
    if config < 12:
        frame = _SILK_MS[config % 4]
    elif config < 16:
        frame = _HYBRID_MS[config % 2]
    else:
        frame = _CELT_MS[config % 4]
    frames = 1 if code == 0 else 2 if code < 3 else (opus[1] & 0x3F if len(opus) > 1 else 0)
    if frames == 0:
        return LONGEST_PACKET_MS
    return min(frame * frames, LONGEST_PACKET_MS)


def bounded(text: str) -> str:
    """``text``, cut to ``MAX_TEXT_CHARS`` with an ellipsis where it was longer."""
    return text if len(text) <= MAX_TEXT_CHARS else text[: MAX_TEXT_CHARS - 1] + "…"


class DownlinkGuard:
    """``audio(packet)`` and ``control()`` raise ``DownlinkFlood`` once the server is past its limits."""

    def __init__(self, limits: DownlinkLimits, clock: Clock) -> None:
        self.limits = limits
        backlog_ms = limits.max_backlog_s * 1000
        self._audio = LeakyBucket(backlog_ms, 1000.0, clock) if backlog_ms else None
        per_s = limits.max_control_per_s
        self._control = LeakyBucket(float(limits.control_burst), per_s, clock) if per_s else None

    def audio(self, opus: bytes) -> None:
        """An audio packet arrived."""
        if self._audio is not None and not self._audio.take(packet_ms(opus)):
            raise DownlinkFlood(f"more audio than real time plus a {self.limits.max_backlog_s:g} s backlog")

    def control(self) -> None:
        """A control message (or, on MQTT, any packet) arrived."""
        if self._control is not None and not self._control.take(1):
            s = self.limits
            raise DownlinkFlood(
                f"more than {s.max_control_per_s:g} control messages a second (burst {s.control_burst})"
            )
