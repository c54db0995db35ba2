"""One connection's flood guard: audio metered in audio time, control messages by count (``FloodSettings``).

A backlog is what a device held back during a stall and sends at once when the network comes
back: at most the stall's audio, never more audio than time has passed. A flood is more than
that, sustained. Two leaky buckets tell them apart: the audio bucket holds ``max_backlog_s`` of
audio and refills at one second per second; the control bucket holds ``control_burst`` messages
and refills at ``max_control_per_s``. The guard belongs to the connection, not to a session, so a
device cannot refill it by saying hello again.
"""

from __future__ import annotations

from pipeline.clock import Clock, LeakyBucket
from pipeline.transport.server.server_settings import FloodSettings


class Flooded(Exception):
    """The connection sent more than its guard allows; the text says what."""


class FloodGuard:
    """``audio(ms)`` and ``control()`` raise ``Flooded`` once the connection is past its limits."""

    def __init__(self, settings: FloodSettings, clock: Clock) -> None:
        self.settings = settings
        backlog_ms = settings.max_backlog_s * 1000
        self._audio = LeakyBucket(backlog_ms, 1000.0, clock) if backlog_ms else None
        self._control = (
            LeakyBucket(float(settings.control_burst), settings.max_control_per_s, clock)
            if settings.max_control_per_s
            else None
        )

    def audio(self, ms: float) -> None:
        """``ms`` of audio arrived (what the packet decoded to, or its announced length when it did not)."""
        if self._audio is not None and not self._audio.take(ms):
            raise Flooded(f"more audio than real time plus a {self.settings.max_backlog_s:g} s backlog")

    def control(self) -> None:
        """A control message (or an MQTT packet) arrived."""
        if self._control is not None and not self._control.take(1):
            s = self.settings
            raise Flooded(f"more than {s.max_control_per_s:g} control messages a second (burst {s.control_burst})")
