"""The contract: the event types that flow between stages, the stage protocol, latency as data.

Each event type belongs to one edge of the voice chain (audio in, speech
boundaries, transcript, LLM calls and tokens, sentences, audio out, turn end).
Events carry data only: no timestamps. Time is stamped by the orchestration's
single timing wrapper when it sees an event pass, so "first token" means the
same thing for every stage implementation.

An LLM call is told in one vocabulary from the model to the recorder: a chat
backend yields ``TokenDelta``, ``OutputStart``, ``ToolCallDelta``, ``ToolCall`` and ``CallEnd`` and
the LLM stage passes them on unchanged between its own ``CallStart`` and the next one.
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

SAMPLE_RATE = 16000
FRAME_MS = 60
FRAME_SAMPLES = SAMPLE_RATE * FRAME_MS // 1000
FRAME_BYTES = FRAME_SAMPLES * 2  # 16-bit little-endian mono PCM


# the silero VAD's end-pointers: the lab's, and xiaozhi-esp32-server's default (XiaozhiServerProfile)
VAD_PROFILES = ("lab", "xiaozhi-server")


@dataclass(frozen=True, slots=True)
class XiaozhiServerProfile:
    """The settings of the silero VAD's ``profile = "xiaozhi-server"`` (table ``[vad.xiaozhi_server]``).

    A settings value shared by the stage (stages/vad/xiaozhi.py) and the settings that hold it, as
    ``LatencyProfile`` is. The defaults are the real server's shipped configuration; each is named
    so that a change enters config_id.
    """

    threshold: float = 0.5  # config.yaml SileroVAD.threshold
    threshold_low: float = 0.3  # config.yaml SileroVAD.threshold_low
    vote_window: int = 5  # connection.py: deque(maxlen=5)
    vote_needed: int = 3  # silero.py: frame_window_threshold
    silence_ms: int = 200  # config.yaml SileroVAD.min_silence_duration_ms, between arrivals
    pre_speech_frames: int = 10  # asr/base.py: asr_audio[-10:], the device's last 10 packets
    min_utterance_ms: int = 900  # asr/base.py: an utterance must be longer than 15 frames of 1920 bytes

    def problem(self) -> str:
        """What is wrong with these settings, "" when nothing."""
        if not 0 < self.threshold_low <= self.threshold < 1:
            return (
                f"threshold_low = {self.threshold_low}, threshold = {self.threshold}: "
                "need 0 < threshold_low <= threshold < 1"
            )
        if not 0 < self.vote_needed <= self.vote_window:
            return f"vote_needed = {self.vote_needed}, vote_window = {self.vote_window}: need 0 < needed <= window"
        if self.silence_ms <= 0 or self.pre_speech_frames < 0 or self.min_utterance_ms < 0:
            return "silence_ms must be positive, pre_speech_frames and min_utterance_ms >= 0"
        return ""


@dataclass(frozen=True, slots=True)
class AudioFrame:
    """One uplink frame of 16 kHz mono 16-bit PCM, as a xiaozhi device sends it.

    ``arrival_ms`` is when the frame arrived, in milliseconds on the receiver's clock since the
    first frame of the turn arrived; whoever takes frames off a network fills it in. ``None``
    means the frames arrive at audio pace, so audio time stands for arrival time. An end-pointer
    that, like the real xiaozhi-esp32-server, measures silence between arrivals reads it.
    ``packet_ms`` is the length of the packets the device sent, when frames were cut from packets of
    another size (a desktop client's 20 ms): the real server keeps its pre-roll in packets.
    """

    seq: int
    pcm: bytes
    duration_ms: int = FRAME_MS
    arrival_ms: int | None = None
    packet_ms: int | None = None


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


# what a ``VadDecision`` decided
VERDICT_END = "end"  # a VAD declared the end-point: its silence had passed
VERDICT_FINISHED = "finished"  # an end-of-turn model heard a finished turn at a pause: the end-point
VERDICT_WAIT = "wait"  # it heard an unfinished one: listening goes on
VERDICT_MAX_SILENCE = "max_silence"  # after a "wait", the pause grew to its limit: the end-point all the same
VERDICT_END_OF_INPUT = "end_of_input"  # the audio ran out in the middle of the utterance: the end-point


def thread_cpu_ns() -> int:
    """The CPU time the calling thread has used, in ns (``CLOCK_THREAD_CPUTIME_ID``): what a stage may read of its
    own cost (``VadDecision.cpu_ns``). A CPU clock, not a clock of the world: read around work that holds its thread
    throughout, it says what the work cost and never when it happened, so it is no rival to the recorder's stamps.
    (``getrusage``'s per-thread figure is not a substitute: here it moved in steps of a scheduler tick.)"""
    return time.thread_time_ns()


@dataclass(frozen=True, slots=True)
class VadDecision:
    """A decision the VAD made, for the record: the recorder files it on the VAD's span, stamped as it passes.

    Data only, as every event: the stages after the VAD pass over it. ``at_ms`` is the audio time at the end
    of the frame it was made on, ``speech_end_ms`` where the speech it judged had ended (audio time).
    ``probability`` is an end-of-turn model's that the turn is finished (None: no model was asked).
    ``cpu_ns`` is the CPU time the deciding thread spent on it, read by the stage from its thread's own CPU
    clock, never the wall clock: a model's inference, or a frame VAD's classification of every frame up to
    it (``frames`` of them); None where the stage cannot tell its own (a model batched with other streams).
    """

    verdict: str  # one of the VERDICT_ names above
    at_ms: int
    speech_end_ms: int
    probability: float | None = None
    cpu_ns: int | None = None
    frames: int = 0


@dataclass(frozen=True, slots=True)
class Transcript:
    """What the ASR heard the user say, and in which language: the LLM's input for the turn."""

    text: str
    language: str


@dataclass(frozen=True, slots=True)
class CallStart:
    """An LLM request is about to be sent (the first-token clock starts here).

    The events of the call (``TokenDelta``, ``ToolCall``, ``CallEnd``) follow it and belong to it.
    """

    index: int
    purpose: str  # "answer", "sentence" (per-sentence mode) or "after_tool" (the call after a tool's result)
    model: str
    max_tokens: int
    input_tokens: int = 0
    server_address: str = ""


@dataclass(frozen=True, slots=True)
class TokenDelta:
    """Output text of the current call; an empty one is a streamed chunk that carried no text."""

    text: str


@dataclass(frozen=True, slots=True)
class OutputStart:
    """The current call's first output exists but is held back until the backend knows whether it is
    text or a tool call (M1: the first output of any kind is the first token)."""


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of a tool call as it streams; the first one is the call's first output (M1)."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The current call asks for a tool, its arguments complete."""

    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool's answer to the current call's ``ToolCall``, handed back to the model in the next call."""

    name: str
    result: str
    where: str = ""  # "device": the tool ran on the device, called over its link (xiaozhi MCP)
    call_id: str = ""  # the id the call went by on its link (MCP: the JSON-RPC id)
    error: str = ""  # the call failed: the stage raises right after this event


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the LLM is offered it (the lab's pretend ones, or a device's listed over MCP)."""

    name: str
    description: str
    parameters_json: str


class ToolFailed(RuntimeError):
    """A tool call that failed (the tool said so, or never answered): the turn fails with it (M7).

    ``where`` and ``call_id`` are for the trace, as a ``ToolResult``'s."""

    def __init__(self, message: str, where: str = "", call_id: str = "") -> None:
        super().__init__(message)
        self.where, self.call_id = where, call_id


@dataclass(frozen=True, slots=True)
class CallEnd:
    """The current call finished."""

    finish_reason: str  # "stop", "length", "tool_calls"
    output_tokens: int
    input_tokens: int = 0  # prompt tokens
    cached_tokens: int | None = None  # prompt tokens served from a cache (None: the backend does not say)
    answer_complete: bool = True  # per-sentence mode: no further sentence follows
    server_timings: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class QueueWait:
    """The current call waited for a shared model's scheduler: when it asked and when it got a slot.

    The times are the scheduler's own clock readings (epoch ns), not stamps taken as the event
    passes a stage boundary: the wait happened before the call's first output could."""

    enqueued_ns: int
    granted_ns: int
    priority: str  # "interactive" or "background"


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
    | VadDecision
    | Transcript
    | CallStart
    | TokenDelta
    | OutputStart
    | ToolCallDelta
    | ToolCall
    | ToolResult
    | CallEnd
    | QueueWait
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


@dataclass(frozen=True, slots=True)
class LatencyProfile:
    """Simulated latency as data, in milliseconds: a first-item delay, a per-item delay, seeded
    jitter (uniform in [-jitter_ms, +jitter_ms], floored at zero)."""

    first_ms: float = 0.0
    per_item_ms: float = 0.0
    jitter_ms: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("first_ms", "per_item_ms", "jitter_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"latency {name} must be >= 0, got {getattr(self, name)}")

    def salted(self, salt: int) -> LatencyProfile:
        """The same profile with jitter that differs per turn (``salt``) but repeats per run."""
        return LatencyProfile(self.first_ms, self.per_item_ms, self.jitter_ms, self.seed * 7919 + salt)

    def delays_s(self, salt: int = 0) -> Iterator[float]:
        """Seconds to wait before item 0, 1, 2, ...; the same seed and salt give the same delays."""
        rng = random.Random(self.seed * 1_000_003 + salt)
        base = self.first_ms
        while True:
            jitter = rng.uniform(-self.jitter_ms, self.jitter_ms) if self.jitter_ms else 0.0
            yield max(0.0, base + jitter) / 1000
            base = self.per_item_ms
