"""Per-turn rows computed from traces alone (METHOD M3, M10).

The only input is span records; nothing here knows about stages or the
orchestration, so a trace file from anywhere gives the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter

from pipeline.analysis import textmetrics
from pipeline.analysis.numbers import Row, median
from pipeline.analysis.traces import AttrValue, ReadProblems, SpanRecord
from pipeline.analysis.wire import WIRE_COLUMNS, wire_split
from pipeline.tracing import names

# The same question is asked round after round (M5) and by every device of a fleet, and the ASR
# usually hears a clip the same way each time: its score (normalisation and edit distance, the
# dearest part of a row) is computed once per distinct (reference, transcript, language), and an
# answer's keywords once per distinct answer.
error_rate = lru_cache(maxsize=1 << 16)(textmetrics.error_rate)
keyword_score = lru_cache(maxsize=1 << 16)(textmetrics.keyword_score)

# A device's view across a real transport (empty in-process).
DEVICE_COLUMNS = (
    "transport",
    "stt_received_ms",
    "first_audio_received_ms",
    "first_audible_ms",
    "interrupt_received_ms",
    "interrupt_played_ms",
)
# Columns of bench.csv: the M10 set first, then the per-stage times.
COLUMNS = (
    "run_id",
    "condition",
    "config_id",
    "question_id",
    "round",
    "warmup",
    "first_token_ms",
    "total_ms",
    "tokens",
    "ok",
    "error",
    "temp_c",
    "note",
    "whole_turn_ms",
    "first_audio_ms",
    "vad_endpoint_ms",
    "asr_ms",
    "llm_calls",
    "llm_first_token_ms_per_call",
    "sentences",
    "sentence_first_token_min_ms",
    "sentence_first_token_median_ms",
    "sentence_first_token_max_ms",
    "tts_first_frame_ms",
    "llm_first_chunk_ms",
    "llm_generation_ms",
    "tool_call_ms",
    "device_tool_ms",
    "prompt_tokens",
    "prompt_cached_tokens",
    "leftover_wait_ms",
    "other_cpu_ms",
    "other_cpu_share",
    "load_avg_1m",
    "server_queue_ms",
    "server_prompt_ms",
    "server_generation_ms",
    "llm_model",
    "llm_endpoint",
    "asr_error_rate",
    "asr_error_metric",
    "answer_quality",
    "language",
    "category",
    "scripted",
    "clock",
    "trace_id",
    "turn_start_ns",
    *DEVICE_COLUMNS,
    "packets_lost",
    "packets_late",
    "device",
    "devices",
    "queue_wait_ms",
    *WIRE_COLUMNS,
)


_EXACT_NS = 1 << 50  # below this, ns -> ms by integers is round(ns / 1e6, 3) exactly (see ``_ms``)


def _ms(start: int | None, end: int | None) -> float | None:
    """``round((end - start) / 1e6, 3)``, the same float, mostly without ``round`` (a row makes a dozen or
    so: the dearest builtin a row calls). ``round`` rounds the float ``ns / 1e6`` to whole microseconds;
    for a whole number of nanoseconds below ``_EXACT_NS`` whose microseconds are not a tie (ending in
    500) that float lies too near ``ns / 1e6`` for the rounding to differ, so the microseconds are rounded
    as integers, and divided by 1000 (correctly rounded, as ``round``'s result is)."""
    if start is None or end is None:
        return None
    ns = end - start
    if 0 <= ns < _EXACT_NS and ns % 1000 != 500:
        return (ns + 500) // 1000 / 1000
    return round(ns / 1e6, 3)


def _int(value: AttrValue, default: int = 0) -> int:
    return int(value) if isinstance(value, (int, float, bool)) else default


def _optional_int(value: AttrValue) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _share(other_cpu_ms: float | None, turn: SpanRecord) -> float | None:
    """Cores other processes kept busy on average during the turn (0.25 = a quarter of one core)."""
    duration_ms = (turn.end_ns - turn.start_ns) / 1e6
    if other_cpu_ms is None or duration_ms <= 0:
        return None
    return round(other_cpu_ms / duration_ms, 3)


def _float(value: AttrValue) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str(value: AttrValue) -> str:
    return "" if value is None else str(value)


@dataclass(slots=True)
class TurnSpans:
    turn: SpanRecord
    children: list[SpanRecord] = field(default_factory=list)
    # children by name, built at the first lookup: a row looks children up by name over a dozen times.
    # Tuples, as the garbage collector stops walking a tuple of plain records (a fleet holds a million).
    _by_name: dict[str, tuple[SpanRecord, ...]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _indexed: int = field(default=-1, init=False, repr=False, compare=False)  # len(children) when built

    def _reindex(self) -> None:
        found: dict[str, list[SpanRecord]] = {}
        for s in self.children:
            found.setdefault(s.name, []).append(s)
        self._by_name = {name: tuple(spans) for name, spans in found.items()}
        self._indexed = len(self.children)

    def named(self, name: str) -> list[SpanRecord]:
        return list(self.spans(name))

    def spans(self, name: str) -> tuple[SpanRecord, ...]:
        """``named`` without the copy, for reading only."""
        if self._indexed != len(self.children):  # first lookup, or children added since
            self._reindex()
        return self._by_name.get(name, ())

    def first(self, name: str) -> SpanRecord | None:
        if self._indexed != len(self.children):
            self._reindex()
        found = self._by_name.get(name)
        return found[0] if found else None


_START = attrgetter("start_ns")  # sort keys for a million spans: cheaper than a lambda's call
_TURN_START = attrgetter("turn.start_ns")


def group_turns(spans: Iterable[SpanRecord], problems: ReadProblems) -> list[TurnSpans]:
    """Find every turn span and its children; duplicates (same span id) count once."""
    by_id: dict[str, SpanRecord] = {}
    for span in spans:
        by_id.setdefault(span.span_id, span)
    turns = {sid: TurnSpans(s) for sid, s in by_id.items() if s.name == names.TURN}
    for span in by_id.values():
        parent = turns.get(span.parent_span_id)
        if parent is not None:
            parent.children.append(span)
    out = []
    for t in turns.values():
        version = t.turn.attributes.get(names.SCHEMA)
        if version != names.SCHEMA_VERSION:
            problems.add(
                f"turn span {t.turn.span_id}: trace schema version {version!r} is not {names.SCHEMA_VERSION!r}; skipped"
            )
            continue
        t.children.sort(key=_START)
        out.append(t)
    out.sort(key=_TURN_START)
    return out


def turn_language(t: TurnSpans) -> str:
    """The question's language, or the one the ASR detected when the question had none."""
    return _language(t.turn.attributes, t.first(names.ASR))


def _language(a: dict[str, AttrValue], asr: SpanRecord | None) -> str:
    detected = _str(asr.attributes.get(names.ASR_LANGUAGE)) if asr is not None else ""
    return _str(a.get(names.LANGUAGE)) or detected


def _call_index(span: SpanRecord) -> int:
    return _int(span.attributes.get(names.CALL_INDEX))


def _sentence_index(span: SpanRecord) -> int:
    return _int(span.attributes.get(names.SENTENCE_INDEX))


def sentence_first_tokens(t: TurnSpans) -> tuple[float, ...]:
    """Each sentence's first-token time (ms, from the moment it could start), in sentence order (M3)."""
    return _first_tokens(sorted(t.spans(names.SENTENCE), key=_sentence_index))


def _first_tokens(sentences: Sequence[SpanRecord]) -> tuple[float, ...]:
    found = (_ms(s.start_ns, s.event_ns(names.EV_FIRST_TOKEN)) for s in sentences)
    return tuple(v for v in found if v is not None)


def servers_of(turns: Sequence[TurnSpans]) -> dict[str, TurnSpans]:
    """Device turn span id -> its server's turn, where both ends' spans are among ``turns`` (joined
    traces: the server's turn span is a child of the device's, filed among its children)."""
    by_id = {t.turn.span_id: t for t in turns}
    out = {}
    for t in turns:
        server = t.first(names.TURN) if t.first(names.DEVICE) is not None else None
        if server is not None and server.span_id in by_id:
            out[t.turn.span_id] = by_id[server.span_id]
    return out


def turn_rows(turns: Sequence[TurnSpans], servers: dict[str, TurnSpans] | None = None) -> list[Row]:
    """Each turn's row; a device's turn whose server's spans are here gains the split of its first sound."""
    servers = servers_of(turns) if servers is None else servers
    return [turn_row(t, servers.get(t.turn.span_id)) for t in turns]


def turn_row(t: TurnSpans, server: TurnSpans | None = None) -> Row:
    """One bench.csv row from one turn's spans (and, for a device's turn, its server's)."""
    return turn_row_and_sentences(t, server)[0]


def turn_row_and_sentences(t: TurnSpans, server: TurnSpans | None = None) -> tuple[Row, tuple[float, ...]]:
    """``turn_row``, and the ``sentence_first_tokens`` it was computed from (the report keeps both).

    The row's keys are in COLUMNS order (a test holds it to that): the report keeps it as it is."""
    a = t.turn.attributes
    get = a.get
    speech_end = t.turn.event_ns(names.EV_USER_SPEECH_END)
    calls = sorted(t.spans(names.LLM_CALL), key=_call_index)
    call_ft = [_ms(c.start_ns, c.event_ns(names.EV_FIRST_TOKEN)) for c in calls]
    sentences = sorted(t.spans(names.SENTENCE), key=_sentence_index)
    sentence_ft = _first_tokens(sentences)
    tts = sorted(t.spans(names.TTS), key=_sentence_index)
    vad = t.first(names.VAD)
    asr = t.first(names.ASR)
    playback = t.first(names.PLAYBACK)
    device = t.first(names.DEVICE)
    language = _language(a, asr)
    ok = get(names.OK) is True
    other_cpu_ms = _float(get(names.HOST_OTHER_CPU_MS))
    first_chunk, generation, tool_ms, prompt, cached, s_queue, s_prompt, s_generation, model = _llm_segments(calls)
    asr_error, asr_metric, quality = _quality(t, a, _Heard(asr, device, sentences, playback, language))
    row: Row = {
        "run_id": _str(get(names.RUN_ID)),
        "condition": _str(get(names.CONDITION)),
        "config_id": _str(get(names.CONFIG_ID)),
        "question_id": _str(get(names.QUESTION_ID)),
        "round": _int(get(names.ROUND)),
        "warmup": int(get(names.WARMUP) is True),
        "first_token_ms": call_ft[0] if call_ft else None,
        "total_ms": _ms(calls[0].start_ns, max(c.end_ns for c in calls)) if calls else None,
        "tokens": sum(_int(c.attributes.get(names.GEN_AI_OUTPUT_TOKENS)) for c in calls),
        "ok": int(ok),
        "error": "" if ok else _str(get(names.ERROR_TYPE)) or "unknown",
        "temp_c": _float(get(names.TEMP_C)),
        "note": _str(get(names.NOTE)),
        "whole_turn_ms": _ms(speech_end, playback.end_ns) if playback and ok and not _barged(device) else None,
        "first_audio_ms": _ms(speech_end, playback.start_ns) if playback else None,
        "vad_endpoint_ms": _ms(speech_end, vad.end_ns) if vad and vad.status_code != names.STATUS_ERROR else None,
        "asr_ms": _ms(asr.start_ns, asr.end_ns) if asr and asr.status_code != names.STATUS_ERROR else None,
        "llm_calls": len(calls),
        "llm_first_token_ms_per_call": ";".join("" if v is None else f"{v:g}" for v in call_ft),
        "sentences": len(sentences) or _device_sentences(device),
        "sentence_first_token_min_ms": min(sentence_ft) if sentence_ft else None,
        "sentence_first_token_median_ms": round(median(sentence_ft), 3) if sentence_ft else None,
        "sentence_first_token_max_ms": max(sentence_ft) if sentence_ft else None,
        "tts_first_frame_ms": _ms(tts[0].start_ns, tts[0].event_ns(names.EV_FIRST_FRAME)) if tts else None,
        "llm_first_chunk_ms": first_chunk,
        "llm_generation_ms": generation,
        "tool_call_ms": tool_ms,
        "device_tool_ms": _device_tools_ms(t, server),
        "prompt_tokens": prompt,
        "prompt_cached_tokens": cached,
        "leftover_wait_ms": _float(get(names.LEFTOVER_WAIT_MS)),
        "other_cpu_ms": other_cpu_ms,
        "other_cpu_share": _share(other_cpu_ms, t.turn),
        "load_avg_1m": _float(get(names.HOST_LOAD_AVG_1M)),
        "server_queue_ms": s_queue,
        "server_prompt_ms": s_prompt,
        "server_generation_ms": s_generation,
        "llm_model": model,
        "llm_endpoint": _str(get(names.LLM_ENDPOINT)),
        "asr_error_rate": asr_error,
        "asr_error_metric": asr_metric,
        "answer_quality": quality,
        "language": language,
        "category": _str(get(names.CATEGORY)),
        "scripted": _str(get(names.SCRIPTED)),
        "clock": _str(get(names.CLOCK)),
        "trace_id": t.turn.trace_id,
        "turn_start_ns": t.turn.start_ns,
        **_device(device, playback, speech_end),
        "packets_lost": _optional_int(get(names.PACKETS_LOST)),
        "packets_late": _optional_int(get(names.PACKETS_LATE)),
        "device": _optional_int(get(names.DEVICE_INDEX)),
        "devices": _optional_int(get(names.DEVICE_COUNT)),
        "queue_wait_ms": _queue_wait(t.spans(names.LLM_QUEUE)),
        **wire_split(
            t.turn,
            device,
            server.turn if server is not None else None,
            server.first(names.DOWNLINK) if server is not None else None,
            _ms,
        ),
    }
    return row, sentence_ft


def _queue_wait(queues: Sequence[SpanRecord]) -> float | None:
    """Time the turn's calls waited for the shared model (M2's queue); None where no scheduler stood in front."""
    waits = [_ms(s.start_ns, s.end_ns) for s in queues]
    known = [w for w in waits if w is not None]
    return round(sum(known), 3) if known else None


def _device(device: SpanRecord | None, playback: SpanRecord | None, speech_end: int | None) -> Row:
    """A device's view across a real transport, from the user's end of speech: empty in-process."""
    if device is None:
        return _NO_DEVICE.copy()
    abort = device.event_ns(names.EV_ABORT)
    last_in = device.event_ns(names.EV_LAST_AUDIO_RECEIVED)
    played = playback.end_ns if playback is not None else None
    return {
        "transport": _str(device.attributes.get(names.TRANSPORT)),
        "stt_received_ms": _ms(speech_end, device.event_ns(names.EV_STT)),
        "first_audio_received_ms": _ms(speech_end, device.event_ns(names.EV_FIRST_AUDIO_RECEIVED)),
        "first_audible_ms": _ms(speech_end, device.event_ns(names.EV_FIRST_AUDIBLE)),
        # barge-in: from the abort until the server's audio stopped coming, and until the device fell silent
        "interrupt_received_ms": _ms(abort, max(last_in, abort)) if abort is not None and last_in is not None else None,
        "interrupt_played_ms": _ms(abort, max(played, abort)) if abort is not None and played is not None else None,
    }


_NO_DEVICE: Row = {key: "" if key == "transport" else None for key in DEVICE_COLUMNS}


def _barged(device: SpanRecord | None) -> bool:
    """The user cut the answer off: the turn's end is the user's, not the pipeline's."""
    return device is not None and device.event_ns(names.EV_ABORT) is not None


def _device_sentences(device: SpanRecord | None) -> int:
    return sum(1 for e in device.events if e.name == names.EV_SENTENCE_START) if device is not None else 0


@dataclass(frozen=True, slots=True)
class _Heard:
    """What a turn's quality is read from, found once for the whole row."""

    asr: SpanRecord | None
    device: SpanRecord | None
    sentences: list[SpanRecord]  # in sentence order
    playback: SpanRecord | None
    language: str


def _transcript(asr: SpanRecord | None, device: SpanRecord | None) -> str | None:
    """What the ASR heard: from its span, or what the device was told (``stt``) when the server is not ours."""
    if asr is not None:
        return None if asr.status_code == names.STATUS_ERROR else _str(asr.attributes.get(names.TRANSCRIPT))
    if device is None or device.event_ns(names.EV_STT) is None:
        return None
    return _str(device.attributes.get(names.TRANSCRIPT))


def _answer(sentences: Sequence[SpanRecord], device: SpanRecord | None) -> str:
    """The spoken answer: the sentence spans, or the sentence texts the device was sent."""
    if sentences:
        return " ".join(_str(s.attributes.get(names.SENTENCE_TEXT)) for s in sentences)
    said = [e for e in device.events if e.name == names.EV_SENTENCE_START] if device is not None else []
    return " ".join(_str(e.attributes.get(names.SENTENCE_TEXT)) for e in said)


def _server_sum(calls: list[SpanRecord], key: str) -> float | None:
    values = [c.attributes.get(key) for c in calls]
    found = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return round(sum(found), 3) if found else None


_LlmSegments = tuple[
    float | None, float | None, float | None, int | None, int | None, float | None, float | None, float | None, str
]


def _device_tools_ms(t: TurnSpans, server: TurnSpans | None) -> float | None:
    """The turn's tool calls run on the device (MCP over its link), round trips summed; None: there were none."""
    spans = t.spans(names.DEVICE_TOOL_CALL) or (server.spans(names.DEVICE_TOOL_CALL) if server else ())
    # summed in nanoseconds, then made ms once: exact, as every other column (a failed call's wait counts too)
    return _ms(0, sum(s.end_ns - s.start_ns for s in spans)) if spans else None


def _llm_segments(calls: list[SpanRecord]) -> _LlmSegments:
    """Client-side first chunk, generation and tool call times, the prompt's tokens, the server's own
    breakdown where it reported one (M2), and the model: the row's columns of those names, in order."""
    generation = [_ms(c.event_ns(names.EV_FIRST_TOKEN), c.end_ns) for c in calls]
    known = [g for g in generation if g is not None]
    first = calls[0] if calls else None
    return (
        _ms(first.start_ns, first.event_ns(names.EV_FIRST_CHUNK)) if first else None,
        round(sum(known), 3) if known else None,
        next((_ms(c.start_ns, t) for c in calls if (t := c.event_ns(names.EV_TOOL_CALL))), None),
        _optional_int(first.attributes.get(names.GEN_AI_INPUT_TOKENS)) if first else None,
        _optional_int(first.attributes.get(names.PROMPT_CACHED_TOKENS)) if first else None,
        _server_sum(calls, names.SERVER_QUEUE_MS),
        _server_sum(calls, names.SERVER_PROMPT_MS),
        _server_sum(calls, names.SERVER_PREDICTED_MS),
        _str(first.attributes.get(names.GEN_AI_MODEL)) if first else "",
    )


def _quality(t: TurnSpans, a: dict[str, AttrValue], heard: _Heard) -> tuple[float | None, str, float | None]:
    """ASR error rate against the reference text and its metric, and expected keywords in the answer (M18)."""
    transcript = _transcript(heard.asr, heard.device)
    scored = None if transcript is None else error_rate(_str(a.get(names.REFERENCE_TEXT)), transcript, heard.language)
    answer = _answer(heard.sentences, heard.device)
    tools = " ".join(_str(c.attributes.get(names.TOOL_NAME)) for c in t.spans(names.LLM_CALL))
    quality = keyword_score(answer + " " + tools, _str(a.get(names.EXPECTED_KEYWORDS)))
    return (
        round(scored[0], 4) if scored else None,
        scored[1] if scored else "",
        round(quality, 4) if quality is not None and heard.playback else None,
    )


def rows_from_spans(spans: Iterable[SpanRecord], problems: ReadProblems | None = None) -> list[Row]:
    return turn_rows(group_turns(spans, problems or ReadProblems()))
