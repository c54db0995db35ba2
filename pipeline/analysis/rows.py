"""One turn's spans -> its row (``turn_row``), computed from traces alone (METHOD M3, M10).

The only input is span records, grouped into turns by ``turns``; nothing here knows about
stages or the orchestration, so a trace file from anywhere gives the same numbers. Rows are
made for callers by ``facts.facts_of`` (each turn's row and what the report keeps beside it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from pipeline.analysis import textmetrics
from pipeline.analysis.endpoint_truth import decisions, endpoint_truth
from pipeline.analysis.numbers import median, ms
from pipeline.analysis.traces import AttrValue, ReadSpan, attr_number
from pipeline.analysis.turns import TurnSpans
from pipeline.analysis.wire_segment import wire_split
from pipeline.records.turn_row import TurnRow
from pipeline.tracing import names

# The same question is asked round after round (M5) and by every device of a fleet, and the ASR
# usually hears a clip the same way each time: its score (normalisation and edit distance, the
# dearest part of a row) is computed once per distinct (reference, transcript, language), and an
# answer's keywords once per distinct answer.
error_rate = lru_cache(maxsize=1 << 16)(textmetrics.error_rate)
keyword_score = lru_cache(maxsize=1 << 16)(textmetrics.keyword_score)


def _int(value: AttrValue, default: int = 0) -> int:
    return int(value) if isinstance(value, (int, float, bool)) else default


def _optional_int(value: AttrValue) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _cpu_ms(span: ReadSpan) -> float | None:
    """This process's CPU time (user and system) the stage's span records, from its start to its first output."""
    a = span.attributes
    user, system = attr_number(a.get(names.CPU_USER_MS)), attr_number(a.get(names.CPU_SYSTEM_MS))
    return None if user is None or system is None else round(user + system, 1)


def _share(other_cpu_ms: float | None, turn: ReadSpan) -> float | None:
    """Cores other processes kept busy on average during the turn (0.25 = a quarter of one core)."""
    duration_ms = (turn.end_ns - turn.start_ns) / 1e6
    if other_cpu_ms is None or duration_ms <= 0:
        return None
    return round(other_cpu_ms / duration_ms, 3)


def _str(value: AttrValue) -> str:
    return "" if value is None else str(value)


def _server_error(server: TurnSpans | None) -> str:
    """Why a device turn's server side failed: "" where it succeeded, or its spans are not at hand."""
    if server is None or server.turn.attributes.get(names.OK) is True:
        return ""
    return _str(server.turn.attributes.get(names.ERROR_TYPE)) or "unknown"


def _language(a: dict[str, AttrValue], asr: ReadSpan | None) -> str:
    detected = _str(asr.attributes.get(names.ASR_LANGUAGE)) if asr is not None else ""
    return _str(a.get(names.LANGUAGE)) or detected


def _call_index(span: ReadSpan) -> int:
    return _int(span.attributes.get(names.CALL_INDEX))


def _sentence_index(span: ReadSpan) -> int:
    return _int(span.attributes.get(names.SENTENCE_INDEX))


def _first_tokens(sentences: Sequence[ReadSpan]) -> tuple[float, ...]:
    found = (ms(s.start_ns, s.event_ns(names.EV_FIRST_TOKEN)) for s in sentences)
    return tuple(v for v in found if v is not None)


def turn_row(t: TurnSpans, server: TurnSpans | None = None) -> tuple[TurnRow, tuple[float, ...]]:
    """One bench.csv row from one turn's spans (and, for a device's turn, its server's), and each
    sentence's first-token time (ms, from the moment it could start, in sentence order, M3) it was
    computed from: the report keeps both."""
    a = t.turn.attributes
    get = a.get
    speech_end = t.turn.event_ns(names.EV_USER_SPEECH_END)
    calls = sorted(t.spans(names.LLM_CALL), key=_call_index)
    call_ft = [ms(c.start_ns, c.event_ns(names.EV_FIRST_TOKEN)) for c in calls]
    sentences = sorted(t.spans(names.SENTENCE), key=_sentence_index)
    sentence_ft = _first_tokens(sentences)
    tts = sorted(t.spans(names.TTS), key=_sentence_index)
    vad = t.first(names.VAD)
    asr = t.first(names.ASR)
    playback = t.first(names.PLAYBACK)
    device = t.first(names.DEVICE)
    language = _language(a, asr)
    ok = get(names.OK) is True
    other_cpu_ms = attr_number(get(names.HOST_OTHER_CPU_MS))
    first_chunk, generation, tool_ms, prompt, cached, s_queue, s_prompt, s_generation, model = _llm_segments(calls)
    asr_error, asr_metric, quality = _quality(t, a, _Heard(asr, device, sentences, playback, language))
    (
        transport,
        answer_edges,
        stt_received,
        first_received,
        first_audible,
        last_audible,
        temperature,
        interrupt_received,
        interrupt_played,
    ) = _device(device, playback, speech_end)
    uplink, server_first_audio, downlink, device_buffer = wire_split(t.turn, device, server)
    truth = endpoint_truth(t, server)
    vad_decisions, vad_decision_cpu = decisions(vad)
    row = TurnRow(
        run_id=_str(get(names.RUN_ID)),
        condition=_str(get(names.CONDITION)),
        config_id=_str(get(names.CONFIG_ID)),
        question_id=_str(get(names.QUESTION_ID)),
        round=_int(get(names.ROUND)),
        warmup=int(get(names.WARMUP) is True),
        first_token_ms=call_ft[0] if call_ft else None,
        total_ms=ms(calls[0].start_ns, max(c.end_ns for c in calls)) if calls else None,
        tokens=sum(_int(c.attributes.get(names.GEN_AI_OUTPUT_TOKENS)) for c in calls),
        ok=int(ok),
        error="" if ok else _str(get(names.ERROR_TYPE)) or "unknown",
        server_error=_server_error(server),
        temp_c=attr_number(get(names.TEMP_C)),
        note=_str(get(names.NOTE)),
        whole_turn_ms=ms(speech_end, playback.end_ns) if playback and ok and not _barged(device) else None,
        first_audio_ms=ms(speech_end, playback.start_ns) if playback else None,
        vad_endpoint_ms=ms(speech_end, vad.end_ns) if vad and vad.status_code != names.STATUS_ERROR else None,
        vad_decisions=vad_decisions,
        vad_decision_cpu_ms=vad_decision_cpu,
        asr_ms=ms(asr.start_ns, asr.end_ns) if asr and asr.status_code != names.STATUS_ERROR else None,
        llm_calls=len(calls),
        llm_first_token_ms_per_call=";".join("" if v is None else f"{v:g}" for v in call_ft),
        sentences=len(sentences) or _device_sentences(device),
        sentence_first_token_min_ms=min(sentence_ft) if sentence_ft else None,
        sentence_first_token_median_ms=round(median(sentence_ft), 3) if sentence_ft else None,
        sentence_first_token_max_ms=max(sentence_ft) if sentence_ft else None,
        tts_first_frame_ms=ms(tts[0].start_ns, tts[0].event_ns(names.EV_FIRST_FRAME)) if tts else None,
        llm_first_chunk_ms=first_chunk,
        llm_generation_ms=generation,
        tool_call_ms=tool_ms,
        device_tool_ms=_device_tools_ms(t, server),
        prompt_tokens=prompt,
        prompt_cached_tokens=cached,
        leftover_wait_ms=attr_number(get(names.LEFTOVER_WAIT_MS)),
        other_cpu_ms=other_cpu_ms,
        other_cpu_share=_share(other_cpu_ms, t.turn),
        load_avg_1m=attr_number(get(names.HOST_LOAD_AVG_1M)),
        asr_cpu_ms=_cpu_ms(asr) if asr else None,
        asr_forced_switches=_optional_int(asr.attributes.get(names.CPU_INVOLUNTARY)) if asr else None,
        asr_other_cpu_ms=attr_number(asr.attributes.get(names.CPU_OTHER_MS)) if asr else None,
        asr_steal_ms=attr_number(asr.attributes.get(names.CPU_STEAL_MS)) if asr else None,
        tts_first_frame_cpu_ms=_cpu_ms(tts[0]) if tts else None,
        first_token_cpu_ms=_cpu_ms(calls[0]) if calls else None,
        server_queue_ms=s_queue,
        server_prompt_ms=s_prompt,
        server_generation_ms=s_generation,
        llm_model=model,
        llm_endpoint=_str(get(names.LLM_ENDPOINT)),
        asr_error_rate=asr_error,
        asr_error_metric=asr_metric,
        answer_quality=quality,
        language=language,
        category=_str(get(names.CATEGORY)),
        scripted=_str(get(names.SCRIPTED)),
        clock=_str(get(names.CLOCK)),
        trace_id=t.turn.trace_id,
        turn_start_ns=t.turn.start_ns,
        transport=transport,
        answer_edges=answer_edges,
        stt_received_ms=stt_received,
        first_audio_received_ms=first_received,
        first_audible_ms=first_audible,
        last_audible_ms=last_audible if ok else None,
        turn_temperature=temperature,
        interrupt_received_ms=interrupt_received,
        interrupt_played_ms=interrupt_played,
        packets_lost=_optional_int(get(names.PACKETS_LOST)),
        packets_late=_optional_int(get(names.PACKETS_LATE)),
        device=_optional_int(get(names.DEVICE_INDEX)),
        devices=_optional_int(get(names.DEVICE_COUNT)),
        queue_wait_ms=_queue_wait(t.spans(names.LLM_QUEUE)),
        uplink_ms=uplink,
        server_first_audio_ms=server_first_audio,
        downlink_ms=downlink,
        device_buffer_ms=device_buffer,
        cut_off=truth.cut_off,
        cut_off_by=truth.cut_off_by or "",
        utterances=truth.utterances,
        endpoint_delay_ms=truth.endpoint_delay_ms,
        true_end_first_audio_ms=truth.true_end_first_audio_ms,
        true_end_first_audible_ms=truth.true_end_first_audible_ms,
    )
    return row, sentence_ft


def _queue_wait(queues: Sequence[ReadSpan]) -> float | None:
    """Time the turn's calls waited for the shared model (M2's queue); None where no scheduler stood in front."""
    waits = [ms(s.start_ns, s.end_ns) for s in queues]
    known = [w for w in waits if w is not None]
    return round(sum(known), 3) if known else None


_DeviceView = tuple[str, str, float | None, float | None, float | None, float | None, str, float | None, float | None]


def _device(device: ReadSpan | None, playback: ReadSpan | None, speech_end: int | None) -> _DeviceView:
    """A device's view across a real transport, from the user's end of speech (DEVICE_COLUMNS, in
    order): empty in-process."""
    if device is None:
        return _NO_DEVICE
    abort = device.event_ns(names.EV_ABORT)
    last_in = device.event_ns(names.EV_LAST_AUDIO_RECEIVED)
    played = playback.end_ns if playback is not None else None
    return (
        _str(device.attributes.get(names.TRANSPORT)),
        _str(device.attributes.get(names.ANSWER_EDGES, "told")),  # traces from before it was kept: xiaozhi's
        ms(speech_end, device.event_ns(names.EV_STT)),
        ms(speech_end, device.event_ns(names.EV_FIRST_AUDIO_RECEIVED)),
        ms(speech_end, device.event_ns(names.EV_FIRST_AUDIBLE)),
        None if abort is not None else ms(speech_end, device.event_ns(names.EV_LAST_AUDIBLE)),  # cut off: the user's
        _str(device.attributes.get(names.TURN_TEMPERATURE)),
        # barge-in: from the abort until the server's audio stopped coming, and until the device fell silent
        ms(abort, max(last_in, abort)) if abort is not None and last_in is not None else None,
        ms(abort, max(played, abort)) if abort is not None and played is not None else None,
    )


_NO_DEVICE: _DeviceView = ("", "", None, None, None, None, "", None, None)


def _barged(device: ReadSpan | None) -> bool:
    """The user cut the answer off: the turn's end is the user's, not the pipeline's."""
    return device is not None and device.event_ns(names.EV_ABORT) is not None


def _device_sentences(device: ReadSpan | None) -> int:
    return sum(1 for e in device.events if e.name == names.EV_SENTENCE_START) if device is not None else 0


@dataclass(frozen=True, slots=True)
class _Heard:
    """What a turn's quality is read from, found once for the whole row."""

    asr: ReadSpan | None
    device: ReadSpan | None
    sentences: list[ReadSpan]  # in sentence order
    playback: ReadSpan | None
    language: str


def _transcript(asr: ReadSpan | None, device: ReadSpan | None) -> str | None:
    """What the ASR heard: from its span, or what the device was told (``stt``) when the server is not ours."""
    if asr is not None:
        return None if asr.status_code == names.STATUS_ERROR else _str(asr.attributes.get(names.TRANSCRIPT))
    if device is None or device.event_ns(names.EV_STT) is None:
        return None
    return _str(device.attributes.get(names.TRANSCRIPT))


def _answer(sentences: Sequence[ReadSpan], device: ReadSpan | None) -> str | None:
    """The spoken answer: the sentence spans, or the sentence texts the device was sent; None where its wire
    carries no text (a telephony line: only the sound), so no answer is scored as empty."""
    if device is not None and device.attributes.get(names.TRANSPORT) in names.SOUND_ONLY_TRANSPORTS:
        return None
    if sentences:
        return " ".join(_str(s.attributes.get(names.SENTENCE_TEXT)) for s in sentences)
    said = [e for e in device.events if e.name == names.EV_SENTENCE_START] if device is not None else []
    return " ".join(_str(e.attributes.get(names.SENTENCE_TEXT)) for e in said)


def _server_sum(calls: list[ReadSpan], key: str) -> float | None:
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
    return ms(0, sum(s.end_ns - s.start_ns for s in spans)) if spans else None


def _llm_segments(calls: list[ReadSpan]) -> _LlmSegments:
    """Client-side first chunk, generation and tool call times, the prompt's tokens, the server's own
    breakdown where it reported one (M2), and the model: the row's columns of those names, in order."""
    generation = [ms(c.event_ns(names.EV_FIRST_TOKEN), c.end_ns) for c in calls]
    known = [g for g in generation if g is not None]
    first = calls[0] if calls else None
    return (
        ms(first.start_ns, first.event_ns(names.EV_FIRST_CHUNK)) if first else None,
        round(sum(known), 3) if known else None,
        next((ms(c.start_ns, t) for c in calls if (t := c.event_ns(names.EV_TOOL_CALL))), None),
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
    quality = None if answer is None else keyword_score(answer + " " + tools, _str(a.get(names.EXPECTED_KEYWORDS)))
    return (
        round(scored[0], 4) if scored else None,
        scored[1] if scored else "",
        round(quality, 4) if quality is not None and heard.playback else None,
    )
