"""When a quiet device is said goodbye to, and when a silent one is let go (xiaozhi-esp32-server's idle rules).

The real server keeps one "last activity" time: voice heard, an answer sent, a detect. While audio
keeps coming with no voice for ``close_connection_no_voice_time`` (120 s), the LLM is asked to say
goodbye and the connection closes after it (``receiveAudioHandle.py`` no_voice_close_connect); with
no activity for 60 s longer, checked every 10 s, the connection just closes (``connection.py``).
A turn under way counts as activity here: the lab's answer is sent when the turn ends.
"""

from __future__ import annotations

from pipeline.clock import Clock
from pipeline.transport.server.server_settings import SessionSettings


class IdleWatch:
    """A session's last activity, and whether the goodbye or the close is due."""

    check_every_s = 10.0  # connection.py: the inactivity check's period

    def __init__(self, settings: SessionSettings, clock: Clock) -> None:
        self.settings, self.clock = settings, clock
        self.last_activity_ns = clock.now_ns()

    def active(self) -> None:
        """Voice was heard, an answer went out, or the device sent a detect."""
        self.last_activity_ns = self.clock.now_ns()

    def _quiet_for(self, limit_s: float) -> bool:
        return bool(limit_s) and self.clock.now_ns() - self.last_activity_ns > limit_s * 1e9

    def goodbye_due(self, busy: bool) -> bool:
        """Audio is coming: whether it has held no voice for ``idle_goodbye_s`` (never while ``busy``)."""
        return not busy and self._quiet_for(self.settings.idle_goodbye_s)

    def silent_too_long(self, busy: bool) -> bool:
        """Whether nothing has happened for ``idle_close_s`` (never while ``busy``)."""
        return not busy and self._quiet_for(self.settings.idle_close_s)
