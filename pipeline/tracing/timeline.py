"""What the timing wrapper saw during one turn: stamped facts, before they become spans.

All times are epoch nanoseconds from the injected clock; ``None`` means the
moment never came (a failed or timed-out turn).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.events import StageInfo, VadDecision


@dataclass(frozen=True, slots=True)
class StageCpu:
    """What a stage's process and machine spent from the stage's start to its first output
    (``pipeline.run.cpu``): this process's CPU time over all its threads, the switches it made and had
    forced on it, other processes' CPU time and the hypervisor's steal (None: not readable)."""

    user_ms: float
    system_ms: float
    voluntary: int
    involuntary: int
    other_ms: float | None
    steal_ms: float | None


@dataclass(slots=True)
class VadTiming:
    """The VAD's stamps in a turn: speech start and end, the end-point, each uplink frame's arrival, the decisions it
    recorded."""

    first_frame_ns: int | None = None
    speech_start_ns: int | None = None
    speech_start_offset_ms: int | None = None
    speech_end_offset_ms: int | None = None
    # when the audio where speech ended reached the server; a device's: when its microphone captured it
    user_speech_end_ns: int | None = None
    end_ns: int | None = None  # when the VAD declared the end-point
    declared_at_ms: int | None = None  # the audio in hand then: the end of the frame it was declared on
    true_end_ns: int | None = None  # a question with a truth: when its last speech sample arrived (a device: captured)
    frame_arrival_ns: dict[int, int] = field(default_factory=dict)  # uplink frame seq -> when it reached the server
    decisions: list[tuple[int, VadDecision]] = field(default_factory=list)  # (when it passed, the decision), in order


@dataclass(slots=True)
class AsrTiming:
    """The ASR's request and transcript in a turn."""

    start_ns: int | None = None
    end_ns: int | None = None
    text: str = ""
    language: str = ""
    cpu: StageCpu | None = None  # from the end-point to the transcript


@dataclass(slots=True)
class CallTiming:
    """One LLM call in a turn: its request, first chunk and token, end, tokens and the server's own timings."""

    index: int
    purpose: str
    model: str
    max_tokens: int
    start_ns: int
    server_address: str = ""
    input_tokens: int = 0
    first_token_ns: int | None = None  # the first output of any kind: text or a tool call's first piece (M1)
    tool_call_ns: int | None = None  # the tool call complete
    end_ns: int | None = None
    cached_tokens: int | None = None  # prompt tokens served from a cache; None: unknown
    output_tokens: int = 0
    finish_reason: str = ""
    tool_name: str = ""
    server_timings: tuple[tuple[str, float], ...] = ()
    token_ns: list[int] = field(default_factory=list)  # stamp of every delta, by position
    queue: QueueTiming | None = None  # the call waited for a shared model's scheduler
    cpu: StageCpu | None = None  # from the request to its first output


@dataclass(frozen=True, slots=True)
class QueueTiming:
    """From the scheduler's own clock: when the call asked for the model and when it got it."""

    enqueued_ns: int
    granted_ns: int
    priority: str


@dataclass(slots=True)
class ToolTiming:
    """One tool call in a turn: its round trip, where it ran, and why it failed if it did."""

    name: str
    start_ns: int
    end_ns: int | None = None
    where: str = ""  # "device": called over the device's link (MCP tools/call), its round trip included
    call_id: str = ""  # the id it went by on that link (the JSON-RPC id)
    error: str = ""  # why it failed; "" when it answered


@dataclass(slots=True)
class SentenceTiming:
    """One sentence cut from the LLM's output: when it could start, its first token, its end."""

    index: int
    text: str
    call_index: int
    ref_ns: int  # the moment this sentence could start arriving
    first_token_ns: int
    complete_ns: int


@dataclass(slots=True)
class TtsTiming:
    """One sentence's synthesis: its request, first frame, end and audio length."""

    sentence_index: int
    start_ns: int
    first_frame_ns: int | None = None
    end_ns: int | None = None
    audio_ms: int = 0
    cpu: StageCpu | None = None  # from the sentence to its first frame


@dataclass(slots=True)
class PlaybackTiming:
    """The answer playing: its first and last sample, its length, and when each sentence started."""

    first_start_ns: int | None = None
    last_end_ns: int | None = None
    audio_ms: int = 0
    sentence_start_ns: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class DownlinkTiming:
    """A server's side of the audio it sent a device: the first and the last frame leaving, and how many."""

    first_sent_ns: int
    last_sent_ns: int
    frames: int = 1


@dataclass(slots=True)
class Reconnection:
    """A device that lost its connection opening it again before a question, on the firmware's backoff."""

    lost_ns: int  # when the connection was lost
    woke_ns: int  # when the question began to open it again
    failed: list[tuple[int, str]] = field(default_factory=list)  # each try that failed: when, and why
    answered_ns: int | None = None  # when the server answered the hello again (None: it did not)


@dataclass(slots=True)
class DeviceTiming:
    """What a device saw of a turn over a real transport: when each message and frame came and went."""

    transport: str  # "websocket", ...
    protocol_version: int
    first_uplink_ns: int | None = None
    last_uplink_ns: int | None = None
    stt_ns: int | None = None  # the last stt received (the server may send one per utterance it heard)
    llm_ns: int | None = None
    first_audio_received_ns: int | None = None
    first_audible_ns: int | None = None  # the answer's first sample above the audibility threshold played
    tts_stop_ns: int | None = None
    abort_ns: int | None = None  # barge-in: the device sent abort
    last_audio_received_ns: int | None = None
    transcript: str = ""
    sentence_starts: list[tuple[int, str]] = field(default_factory=list)  # (received at, text)
    uplink_frames: int = 0
    speech_end_frame: int | None = None  # the uplink frame whose sending marked the user's end of speech
    downlink_frames: int = 0
    undecodable_frames: int = 0
    dropped_frames: int = 0  # audio that came outside tts start .. stop: the firmware drops it unplayed
    reconnects: int = 0  # the connection was gone when the turn began and was opened again (0 or 1)
    temperature: str = ""  # cold_connection, cold_wake or warm (``TURN_TEMPERATURES``)
    last_audible_ns: int | None = None  # the end of the answer's last sample above the threshold (its start + 1 sample)
    stt_at: list[int] = field(default_factory=list)  # every stt received (several: several utterances heard)
    settle_wait_ns: int = 0  # before the turn: waited this long for the server to fall quiet (--settle-ms)
    disconnected_ns: int | None = None  # the connection was lost in this turn, or while idle before it
    reconnection: Reconnection | None = None  # before the turn, the connection opened again (or not)
    answer_edges: str = "told"  # ``names.ANSWER_EDGES``: "inferred" where the wire marks no answer
    bot_marks: list[tuple[int, str, str]] = field(default_factory=list)  # a bot's own: (when, what, its text)


@dataclass(frozen=True, slots=True)
class PacketCounts:
    """A lossy transport's incoming packets during the turn (UDP): played, never came, came too late."""

    received: int
    lost: int
    late: int


@dataclass(slots=True)
class TurnTimeline:
    """Everything the recorder stamped in one turn, from which its spans are made (``tracing.spans``)."""

    start_ns: int
    stages: dict[str, StageInfo] = field(default_factory=dict)
    vad: VadTiming = field(default_factory=VadTiming)
    asr: AsrTiming = field(default_factory=AsrTiming)
    calls: list[CallTiming] = field(default_factory=list)
    tools: list[ToolTiming] = field(default_factory=list)
    sentences: list[SentenceTiming] = field(default_factory=list)
    tts: list[TtsTiming] = field(default_factory=list)
    playback: PlaybackTiming = field(default_factory=PlaybackTiming)
    device: DeviceTiming | None = None  # only a device across a real transport has one
    downlink: DownlinkTiming | None = None  # only a server across a real transport has one
    packets: PacketCounts | None = None  # the incoming audio of a lossy transport (server: uplink; device: downlink)
    dropped: dict[str, int] = field(default_factory=dict)  # a server: what its session dropped since the last turn
    end_ns: int | None = None
    leftover_ns: int = 0  # after the turn ended or was cancelled: waiting for its stages' engine work to finish
    error_type: str = ""
    error_message: str = ""

    @property
    def ok(self) -> bool:
        return not self.error_type


@dataclass(slots=True)
class JobTimeline:
    """One background job (work that competes with the voice turns for the model), as its generator saw it."""

    index: int
    kind: str  # "summarise", "vision"
    start_ns: int
    queue: QueueTiming | None = None
    first_token_ns: int | None = None
    end_ns: int | None = None
    input_chars: int = 0
    output_tokens: int = 0
    error_type: str = ""
    error_message: str = ""
