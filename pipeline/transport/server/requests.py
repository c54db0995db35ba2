"""What starts a turn on the server, and who builds the stages it runs and keeps what it recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from pipeline.run.turn import ServerStages
from pipeline.tracing.timeline import TurnTimeline
from pipeline.transport.server.device_tools import DeviceToolsClient

# How a turn began: a listen start, speech heard while the session listens on, typed text
# (listen detect), a wake word the server chats with (its reply cache off), or the idle goodbye.
STARTED_BY = ("listen", "speech", "text", "wake", "idle")


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """What started a turn; ``question_id`` and ``round`` are the lab emulator's extra fields."""

    session_id: str
    mode: str
    question_id: str = ""
    round: int = 0
    traceparent: str = ""  # W3C trace context of the device's turn, when the device sent one
    started_by: str = "listen"  # one of STARTED_BY
    text: str = ""  # a typed turn's input
    device: DeviceToolsClient | None = field(default=None, compare=False, repr=False)  # the device's MCP tools

    @property
    def typed(self) -> bool:
        """A turn with no audio: its input is text (``listen detect``, a wake word, the idle goodbye)."""
        return self.started_by in ("text", "wake", "idle")

    @property
    def tells_stt(self) -> bool:
        """Whether the device is told what was heard: not for the idle goodbye (the real server sends
        only ``tts start`` for its end prompt, sendAudioHandle.py send_stt_message)."""
        return self.started_by != "idle"


class TurnSources(Protocol):
    """What a server needs from the lab: a turn's stages, where a finished turn goes, a cached reply's audio."""

    def stages(self, request: TurnRequest) -> ServerStages: ...

    def finished(self, request: TurnRequest, timeline: TurnTimeline) -> None: ...

    async def cached_reply(self, text: str, session_id: str) -> list[bytes]:
        """``text`` spoken by the server's TTS as 60 ms frames of 16 kHz PCM, made once and kept: the
        reply to a wake word that the real server plays from a file without any turn. The session's history
        gets it as the assistant's words, as the real server's dialogue does."""
        ...
