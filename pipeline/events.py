"""The event types that flow between stages, and the stage contract.

Each event type belongs to one edge of the voice chain (audio in, speech
boundaries, transcript, LLM calls and tokens, sentences, audio out, turn end).
Events carry data only: no timestamps. Time is stamped by the orchestration's
single timing wrapper when it sees an event pass, so "first token" means the
same thing for every stage implementation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

SAMPLE_RATE = 16000
FRAME_MS = 60
FRAME_SAMPLES = SAMPLE_RATE * FRAME_MS // 1000
FRAME_BYTES = FRAME_SAMPLES * 2  # 16-bit little-endian mono PCM


@dataclass(frozen=True, slots=True)
class AudioFrame:
    """One uplink frame of 16 kHz mono 16-bit PCM, as a xiaozhi device sends it."""

    seq: int
    pcm: bytes
    duration_ms: int = FRAME_MS


@dataclass(frozen=True, slots=True)
class SpeechStart:
    """The VAD heard speech begin; offset is audio time from the start of the turn."""

    offset_ms: int


@dataclass(frozen=True, slots=True)
class SpeechEnd:
    """The VAD decided the utterance is over (end-point).

    ``offset_ms`` is where the speech itself ended in audio time; the time between
    that audio arriving and this event being emitted is the end-point delay.
    """

    offset_ms: int


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str
    language: str


@dataclass(frozen=True, slots=True)
class CallStart:
    """An LLM request is about to be sent (the first-token clock starts here)."""

    index: int
    purpose: str  # "answer", "sentence" (per-sentence mode) or "tool" (a call that may return a tool call)
    model: str
    max_tokens: int
    input_tokens: int = 0
    server_address: str = ""


@dataclass(frozen=True, slots=True)
class TokenDelta:
    call_index: int
    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_index: int
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolResult:
    name: str
    result: str


@dataclass(frozen=True, slots=True)
class CallEnd:
    index: int
    finish_reason: str  # "stop", "length", "tool_calls", "sentence"
    output_tokens: int
    input_tokens: int = 0
    server_timings: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class Sentence:
    """A complete sentence, ready for TTS."""

    index: int
    text: str
    call_index: int
    first_token: int  # position, within its call's deltas, of the delta where the sentence began


@dataclass(frozen=True, slots=True)
class AudioOut:
    """One downlink frame of synthesised speech for one sentence."""

    sentence_index: int
    seq: int
    pcm: bytes
    duration_ms: int = FRAME_MS


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """The server has sent everything for this turn."""

    sentences: int = 0


@dataclass(frozen=True, slots=True)
class StageInfo:
    """What a stage is, for the record: its role, implementation and settings."""

    role: str
    impl: str
    scripted: bool = False
    attributes: tuple[tuple[str, str | int | float | bool], ...] = field(default=())


Event: TypeAlias = (
    AudioFrame
    | SpeechStart
    | SpeechEnd
    | Transcript
    | CallStart
    | TokenDelta
    | ToolCall
    | ToolResult
    | CallEnd
    | Sentence
    | AudioOut
    | TurnEnd
)


class Stage(Protocol):
    """A stage consumes an async stream of events and yields events.

    Implementations never read the clock and never touch the tracer; they may
    sleep or await I/O. ``info`` describes the stage for spans and rows.
    """

    info: StageInfo

    def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]: ...
