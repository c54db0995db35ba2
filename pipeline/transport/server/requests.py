"""What starts a turn on the server, and who builds the stages it runs and keeps what it recorded.

The strings a device names a turn with are cut before anything keeps them (``TurnRequest``): each went
whole into the turn's span, its row and the operator's progress line, so 150 typed turns named with a
780 KB question id grew the output folder by 224 MiB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from pipeline.run.turn import ServerStages
from pipeline.tracing.timeline import TurnTimeline
from pipeline.transport.server.device_tools import DeviceToolsClient

# How a turn began: a listen start, speech heard while the session listens on, typed text
# (listen detect), a wake word the server chats with (its reply cache off), or the idle goodbye.
STARTED_BY = ("listen", "speech", "text", "wake", "idle")
# the lab's question ids are a few characters (en03); one a device makes up is a name, not a text
MOST_ID_CHARS = 128
# a W3C traceparent is 55 characters (version 00), a later version's may be longer; one longer than this
# names no trace and is dropped, not cut (a cut one would name another span)
MOST_TRACEPARENT_CHARS = 256
# a typed question (listen detect) as long as a long spoken one could be; the firmware types wake words
MOST_TEXT_CHARS = 4096


def bounded(text: str, most: int) -> str:
    """A device's string as the lab keeps it: at most ``most`` characters, a cut one saying how much it lost."""
    return text if len(text) <= most else f"{text[:most]}...[{len(text) - most} more characters]"


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

    def __post_init__(self) -> None:
        # cut once here, whichever front door made the request (frozen: set as the dataclass itself would)
        object.__setattr__(self, "question_id", bounded(self.question_id, MOST_ID_CHARS))
        object.__setattr__(self, "text", bounded(self.text, MOST_TEXT_CHARS))
        if len(self.traceparent) > MOST_TRACEPARENT_CHARS:
            object.__setattr__(self, "traceparent", "")

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

    def ended(self, session_id: str) -> None:
        """The session is over (its connection closed): what was kept for it (its history) can go, as the
        real server's dialogue goes with its connection."""
        ...
