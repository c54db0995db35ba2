"""The turn record: one declaration of bench.csv's columns, each with its type, unit and meaning.

``TurnRow``'s fields are bench.csv's columns in the file's order, declared as every record is (``schema``).
Everything else that names a column is generated from it: ``COLUMNS`` (the CSV header), the device's and the wire's
column groups, the numeric columns, the texts many turns share (``REPEATED``), the docs' column table
(``columns_table``; kept equal by a test), and ``column``, the one way generic code turns a column's name into its
value. bench.csv itself is written and read by ``bench_csv``.

A row holds only text, integers, floats and None, so it never takes part in a reference cycle: ``gc=False`` keeps a
fleet's million rows out of the garbage collector's walks. Frozen: once made (``rows.turn_row``) a row is never
changed; the one exception is the reader swapping its repeated texts for one shared copy before anyone else sees it
(``facts.facts_of``).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Annotated, Final

import msgspec

from pipeline.records.schema import CELSIUS, CORES, COUNT, FLAG, MS, NS, SHARE, TEXT, TOKENS, Cell, schema, table
from pipeline.records.schema import meta as _m

# column groups: the device's view across a transport, the split of its first sound (``wire.py``), and the
# end-point scored against the question's truth (``analysis.endpoint_truth``)
DEVICE, WIRE, TRUTH = "device", "wire", "truth"
_EDGES = (  # answer_edges: a call to a voice bot finds its answers by sound (``transport.device.phone_playout``)
    "`told`: the server marks where the answer begins and ends (xiaozhi's `tts start` / `stop`); `inferred`: a "
    "call to a voice bot, found from its sound as a phone's playout buffer plays it, over after a 700 ms pause"
)


class TurnRow(msgspec.Struct, frozen=True, gc=False):
    """One turn's bench.csv row, computed from its spans alone (METHOD M3, M10). Times are from the spans; "end of
    user speech" is the moment the 60 ms frame holding the last speech reached the server (in-process), or the
    moment a device's microphone captured it (across a transport: that frame's capture start plus where in it the
    speech ended). An empty number is one the spans do not give, never an estimate."""

    run_id: Annotated[str, _m(TEXT, "the run the turn belongs to (M10)", repeated=True)] = ""
    condition: Annotated[str, _m(TEXT, "the condition: A, B or B'", repeated=True)] = ""
    config_id: Annotated[
        str,
        _m(
            TEXT,
            "hash of every setting that can change a latency, the models actually loaded, the condition "
            "and the question set (M11); rounds, limit and output paths are left out",
            repeated=True,
        ),
    ] = ""
    question_id: Annotated[str, _m(TEXT, "the question asked", repeated=True)] = ""
    round: Annotated[int, _m(COUNT, "the round, from 1")] = 0
    warmup: Annotated[int, _m(FLAG, "1: the warm-up round, left out of every statistic (M6)")] = 0
    first_token_ms: Annotated[
        float | None,
        _m(MS, "first LLM request sent -> its first output of any kind: text, or a tool call's first piece (M1)"),
    ] = None
    total_ms: Annotated[float | None, _m(MS, "first LLM request sent -> last call's end")] = None
    tokens: Annotated[int, _m(TOKENS, "output tokens of the turn's LLM calls")] = 0
    ok: Annotated[int, _m(FLAG, "1: the turn succeeded")] = 0
    error: Annotated[str, _m(TEXT, "why the turn failed (empty when it succeeded)", repeated=True)] = ""
    server_error: Annotated[
        str, _m(TEXT, "a device's row beside our server's traces: why its side failed (`LlmHttpError`)", repeated=True)
    ] = ""
    temp_c: Annotated[
        float | None,
        _m(CELSIUS, "the hottest sensor (or the temperature command's reading) in the turn; never made up"),
    ] = None
    note: Annotated[
        str,
        _m(
            TEXT,
            "what was converted in the question's audio (mixed to mono, resampled), or why it could not be used",
            repeated=True,
        ),
    ] = ""
    whole_turn_ms: Annotated[float | None, _m(MS, "end of user speech -> last audio frame finished playing (M3)")] = (
        None
    )
    first_audio_ms: Annotated[float | None, _m(MS, "end of user speech -> first audio frame starts playing")] = None
    vad_endpoint_ms: Annotated[float | None, _m(MS, "end of user speech -> VAD declares the end-point")] = None
    vad_decisions: Annotated[
        int | None,
        _m(
            COUNT,
            "decisions the end-of-turn detector recorded on its span: each verdict of an end-of-turn model (Smart "
            "Turn), the end-point of a VAD that meters its own CPU (TEN); empty where it records none",
        ),
    ] = None
    vad_decision_cpu_ms: Annotated[
        float | None,
        _m(
            MS,
            "the CPU those decisions took, summed (the deciding thread's own CPU clock: a model's inference, or a "
            "VAD's frames classified up to its end-point); empty where the detector cannot tell its own",
        ),
    ] = None
    asr_ms: Annotated[float | None, _m(MS, "end-point reaches the ASR -> transcript")] = None
    llm_calls: Annotated[int, _m(COUNT, "LLM calls in the turn")] = 0
    llm_first_token_ms_per_call: Annotated[str, _m(MS, "each call's request -> its first token, `;`-separated")] = ""
    sentences: Annotated[int, _m(COUNT, "sentences spoken")] = 0
    sentence_first_token_min_ms: Annotated[
        float | None,
        _m(
            MS,
            "the moment a sentence could start (its call's request, or the previous sentence of the same "
            "call completing) -> its first token: the turn's least",
        ),
    ] = None
    sentence_first_token_median_ms: Annotated[
        float | None, _m(MS, "as `sentence_first_token_min_ms`: the turn's median")
    ] = None
    sentence_first_token_max_ms: Annotated[
        float | None, _m(MS, "as `sentence_first_token_min_ms`: the turn's greatest")
    ] = None
    tts_first_frame_ms: Annotated[float | None, _m(MS, "first sentence handed to TTS -> its first audio frame")] = None
    llm_first_chunk_ms: Annotated[
        float | None,
        _m(
            MS,
            "first LLM request sent -> its first streamed chunk (a cloud's role-only chunk often comes before "
            "any text)",
        ),
    ] = None
    llm_generation_ms: Annotated[float | None, _m(MS, "each call's first token -> its end, summed")] = None
    tool_call_ms: Annotated[
        float | None,
        _m(
            MS,
            "the request of the turn's first call that called a tool -> that tool call complete (its "
            "arguments streamed)",
        ),
    ] = None
    device_tool_ms: Annotated[
        float | None,
        _m(
            MS,
            "each LLM call that asked for a device's tool ended (its `tools/call` goes out over the device's "
            "link) -> the device's answer is in hand (or the call failed: its wait counts); summed over the "
            "turn's `device.tool_call` spans, empty when none; a device's row takes it from our server's "
            "spans when they are read beside it",
        ),
    ] = None
    prompt_tokens: Annotated[int | None, _m(TOKENS, "the first call's prompt (empty: not reported)")] = None
    prompt_cached_tokens: Annotated[
        int | None, _m(TOKENS, "how much of the first call's prompt came from a cache (empty: not reported)")
    ] = None
    leftover_wait_ms: Annotated[
        float | None,
        _m(
            MS,
            "the turn ended (a timeout cancels it) -> its stages' engine work finished (a decode or "
            "synthesis already running is waited for, so the next turn starts clean)",
        ),
    ] = None
    other_cpu_ms: Annotated[
        float | None,
        _m(
            MS,
            "CPU time other processes used during the turn (the machine's, from `/proc/stat`, minus this "
            "run's process tree): the report flags turns measured on a busy machine",
        ),
    ] = None
    other_cpu_share: Annotated[
        float | None, _m(CORES, "`other_cpu_ms` as cores kept busy on average during the turn")
    ] = None
    load_avg_1m: Annotated[float | None, _m(CORES, "the machine's one-minute load average")] = None
    asr_cpu_ms: Annotated[
        float | None,
        _m(
            MS,
            "this process's CPU time, user and system over all its threads, while the ASR ran (end-point -> "
            "transcript): the same audio is the same work, so it moves with the machine's speed, not with waiting",
        ),
    ] = None
    asr_forced_switches: Annotated[
        int | None, _m(COUNT, "times a core was taken from this process while the ASR ran (involuntary switches)")
    ] = None
    asr_other_cpu_ms: Annotated[
        float | None, _m(MS, "other processes' CPU time while the ASR ran (the machine's, from `/proc/stat`)")
    ] = None
    asr_steal_ms: Annotated[
        float | None, _m(MS, "time the hypervisor gave the machine's cores to another guest while the ASR ran")
    ] = None
    tts_first_frame_cpu_ms: Annotated[
        float | None, _m(MS, "this process's CPU time from the first sentence handed to TTS to its first frame")
    ] = None
    first_token_cpu_ms: Annotated[
        float | None, _m(MS, "this process's CPU time from the first LLM request to its first output")
    ] = None
    server_queue_ms: Annotated[
        float | None, _m(MS, "the LLM server's own queue time, summed over calls (empty when it gave none)")
    ] = None
    server_prompt_ms: Annotated[
        float | None, _m(MS, "the LLM server's own prompt time, summed over calls (empty when it gave none)")
    ] = None
    server_generation_ms: Annotated[
        float | None, _m(MS, "the LLM server's own generation time, summed over calls (empty when it gave none)")
    ] = None
    llm_model: Annotated[str, _m(TEXT, "the model the first LLM call named", repeated=True)] = ""
    llm_endpoint: Annotated[
        str,
        _m(
            TEXT,
            "what answered the LLM calls: in-process llama.cpp, an emulated cloud and its network, a server...",
            repeated=True,
        ),
    ] = ""
    asr_error_rate: Annotated[
        float | None, _m(SHARE, "CER (Chinese) or WER of the transcript against the manifest text")
    ] = None
    asr_error_metric: Annotated[str, _m(TEXT, "`cer` or `wer`: which one `asr_error_rate` is", repeated=True)] = ""
    answer_quality: Annotated[
        float | None, _m(SHARE, "share of the manifest's expected keyword groups in the answer (tool names count)")
    ] = None
    language: Annotated[
        str, _m(TEXT, "the question's language, or the one the ASR detected when it had none", repeated=True)
    ] = ""
    category: Annotated[str, _m(TEXT, "the question's category", repeated=True)] = ""
    scripted: Annotated[str, _m(TEXT, "the stages whose latencies were simulated", repeated=True)] = ""
    clock: Annotated[str, _m(TEXT, "the clock the run measured with: `real` or `virtual`", repeated=True)] = ""
    trace_id: Annotated[str, _m(TEXT, "the turn's trace")] = ""
    turn_start_ns: Annotated[int, _m(NS, "the turn span's start, Unix time")] = 0
    transport: Annotated[
        str,
        _m(
            TEXT, "the transport a device used (empty in-process, as the device's other columns)", DEVICE, repeated=True
        ),
    ] = ""
    answer_edges: Annotated[str, _m(TEXT, _EDGES, DEVICE, repeated=True)] = ""
    stt_received_ms: Annotated[
        float | None,
        _m(MS, "end of user speech (a device: when its microphone captured it) -> the device received `stt`", DEVICE),
    ] = None
    first_audio_received_ms: Annotated[
        float | None, _m(MS, "end of user speech -> the device received its first audio frame", DEVICE)
    ] = None
    first_audible_ms: Annotated[
        float | None,
        _m(
            MS,
            "end of user speech -> the answer's first sample above the audibility threshold (a magnitude "
            "above 64 of 16-bit, about -54 dBFS) played: the silence a person hears",
            DEVICE,
        ),
    ] = None
    last_audible_ms: Annotated[
        float | None,
        _m(
            MS,
            "end of user speech -> the end of the answer's last sample above that threshold played (empty when "
            "the turn failed or the user cut it off, as `whole_turn_ms`)",
            DEVICE,
        ),
    ] = None
    turn_temperature: Annotated[
        str,
        _m(
            TEXT,
            "`cold_connection`: the first turn on its connection (connect, hello, MCP set-up just before it); "
            "`cold_wake`: a turn a wake word started mid-answer; `warm`: the others",
            DEVICE,
            repeated=True,
        ),
    ] = ""
    interrupt_received_ms: Annotated[
        float | None,
        _m(
            MS,
            "the device's barge-in (`abort`, or `listen start` of the next question) -> the last audio frame "
            "of the answer that still arrived",
            DEVICE,
        ),
    ] = None
    interrupt_played_ms: Annotated[float | None, _m(MS, "the device's barge-in -> it fell silent", DEVICE)] = None
    packets_lost: Annotated[
        int | None, _m(COUNT, "a lossy transport (UDP): this side's incoming audio packets that never came")
    ] = None
    packets_late: Annotated[
        int | None, _m(COUNT, "a lossy transport: packets that came after a newer one (not played)")
    ] = None
    device: Annotated[int | None, _m(COUNT, "the device's index in a many-device run")] = None
    devices: Annotated[int | None, _m(COUNT, "devices in a many-device run")] = None
    queue_wait_ms: Annotated[
        float | None,
        _m(
            MS,
            "each LLM call asked the shared model's scheduler -> it got a slot (the scheduler's clock), "
            "summed over the turn's calls; empty without a scheduler",
        ),
    ] = None
    uplink_ms: Annotated[
        float | None,
        _m(
            MS,
            "a device's row with our server's traces read beside it (joined by the `traceparent`): the "
            "device's microphone captured the end of speech -> the frame holding it reached the server (the "
            "rest of that frame's capture, then the wire); with the next three it sums to `first_audible_ms` "
            "(across machines the clocks must be in step)",
            WIRE,
        ),
    ] = None
    server_first_audio_ms: Annotated[
        float | None,
        _m(MS, "as `uplink_ms`: the speech-end frame reached the server -> it sent the first audio frame", WIRE),
    ] = None
    downlink_ms: Annotated[
        float | None, _m(MS, "as `uplink_ms`: the server sent the first audio frame -> the device received it", WIRE)
    ] = None
    device_buffer_ms: Annotated[
        float | None,
        _m(MS, "as `uplink_ms`: the device received the first audio frame -> its first audible sample played", WIRE),
    ] = None
    cut_off: Annotated[
        int | None,
        _m(
            FLAG,
            "1: the end-point was declared before the user finished (the audio in hand at the declaration ends "
            "before the question's true end of speech, its truth's `speech_end_ms`): part of the question was "
            "answered; empty for a question without a truth, as every column of this group",
            TRUTH,
        ),
    ] = None
    cut_off_by: Annotated[
        str,
        _m(
            TEXT,
            "how `cut_off` was seen: `declared`, from the VAD span that declared the end-point (in one process, or "
            "a device read beside its server's traces); `stt`, a device alone, inferred from its server's "
            "recognised-text messages (the first before the user finished, or more than one): it can miss a cut, "
            "and take an earlier exchange's late text for this one's (`pipeline.replay --settle-ms` prevents it)",
            TRUTH,
            repeated=True,
        ),
    ] = ""
    utterances: Annotated[
        int | None,
        _m(
            COUNT,
            "the utterances the run's end-of-turn detector makes of the whole question, heard alone and untimed "
            "(1: it held the question together)",
            TRUTH,
        ),
    ] = None
    endpoint_delay_ms: Annotated[
        float | None,
        _m(MS, "the true end of speech -> the end-point declared (negative: declared before the user finished)", TRUTH),
    ] = None
    true_end_first_audio_ms: Annotated[
        float | None,
        _m(
            MS,
            "the true end of speech -> first audio frame starts playing (in-process; beside `first_audio_ms`)",
            TRUTH,
        ),
    ] = None
    true_end_first_audible_ms: Annotated[
        float | None,
        _m(
            MS,
            "a device: the true end of speech (its microphone captured the question's last speech sample) -> the "
            "answer's first audible sample played (`first_audible_ms` beside): the silence a person hears",
            TRUTH,
        ),
    ] = None


class UnknownColumn(KeyError):
    """A name that is not one of bench.csv's columns."""


SCHEMA: Final = schema(TurnRow)
COLUMNS: Final = tuple(c.name for c in SCHEMA)  # bench.csv's header
DEVICE_COLUMNS: Final = tuple(c.name for c in SCHEMA if c.group == DEVICE)
WIRE_COLUMNS: Final = tuple(c.name for c in SCHEMA if c.group == WIRE)
TRUTH_COLUMNS: Final = tuple(c.name for c in SCHEMA if c.group == TRUTH)
NUMERIC: Final = frozenset(c.name for c in SCHEMA if c.kind is not str)
# texts many turns share (a run's, a question's, a model's...), kept once by the reader (``facts.facts_of``)
REPEATED: Final = tuple(c.name for c in SCHEMA if c.repeated)
_BY_NAME: Final = {c.name: c for c in SCHEMA}


def column(name: str) -> Callable[[TurnRow], Cell]:
    """The getter of a column named by a caller (a metric, a table's column): refuses a name that is
    not a column, so a typo fails where it is written, not as an empty figure."""
    getter: Callable[[TurnRow], Cell] = attrgetter(checked(name))
    return getter


def checked(name: str) -> str:
    """``name``, if it is one of bench.csv's columns."""
    if name not in _BY_NAME:
        raise UnknownColumn(f"{name!r} is not a bench.csv column (see pipeline/records/turn_row.py)")
    return name


def columns_table() -> str:
    """The README's column table: each column's name, type, unit and meaning, in bench.csv's order."""
    return table(SCHEMA)
