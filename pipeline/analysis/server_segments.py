"""A server's segments of first sound, for a server the lab did not write (nor instruments).

A real xiaozhi server sends no ``traceparent`` and writes no spans. What the lab has instead:
the device's spans (when its user stopped speaking, when the first audio arrived and played)
and the spans of the lab's services the server was pointed at (``asr`` and ``tts`` from the
speech services, ``llm.call`` from the LLM relay). All are stamped on one machine's clock, so
they line up; a service span belongs to the device turn whose time span holds its start, which
is unambiguous while one device asks one question at a time (the interop runs do). The lab's
own server, given the same services, is split the same way, so the two compare like for like.

First sound (device speech end -> first audible) splits into consecutive parts:

- ``to_asr_ms``: -> the ASR request reached the speech service: uplink, the server's
  end-pointing (its VAD's silence wait) and its hand-off (WAV written, request sent);
- ``asr_ms``: the ASR request, as the service timed it;
- ``asr_to_llm_ms``: -> the LLM request reached the relay (the server's own: prompt, history);
- ``llm_first_token_ms``: the LLM's first token, as the relay saw it arrive;
- ``llm_to_sentence_ms``: -> the last chunk the LLM streamed before the first TTS request, i.e.
  generation until the first sentence the server chose to speak existed;
- ``sentence_to_tts_ms``: -> the first TTS request reached the service (the server's own);
- ``tts_ms``: that TTS request, as the service timed it;
- ``tts_to_audio_ms``: -> the device received the first audio (the server's own decode, Opus
  encode and pacing, and the downlink);
- ``device_buffer_ms``: -> it began to play.

``server_own_ms`` is what is left of first audible once the measured segments (ASR, LLM first
token and generation to the first sentence, TTS, the device's buffer) are taken out: derived
from measured spans, it holds uplink, end-pointing and downlink (under a millisecond each way
on loopback) besides the server's own work. Any part whose spans are missing stays None.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pipeline.analysis.numbers import median, quantile
from pipeline.analysis.traces import SpanRecord
from pipeline.tracing import names

EV_CHUNK = "chunk"  # the relay's event at every streamed chunk with content after the first
SEGMENTS = (
    "to_asr_ms",
    "asr_ms",
    "asr_to_llm_ms",
    "llm_first_token_ms",
    "llm_to_sentence_ms",
    "sentence_to_tts_ms",
    "tts_ms",
    "tts_to_audio_ms",
    "device_buffer_ms",
)
MEASURED = ("asr_ms", "llm_first_token_ms", "llm_to_sentence_ms", "tts_ms", "device_buffer_ms")
# the state the LLM's first token depends on, as the upstream counted it (through the relay)
PROMPT = ("prompt_tokens", "prompt_cached_tokens")
COLUMNS = ("question_id", "round", "warmup", "ok", "first_audible_ms", *SEGMENTS, "server_own_ms", *PROMPT)

Value = str | int | float | bool | None


def _ms(start: int | None, end: int | None) -> float | None:
    return None if start is None or end is None else round((end - start) / 1e6, 3)


@dataclass(frozen=True, slots=True)
class DeviceTurn:
    turn: SpanRecord
    device: SpanRecord


def device_turns(spans: Iterable[SpanRecord]) -> list[DeviceTurn]:
    """Each turn span with its ``device`` child, in time order."""
    spans = list(spans)
    devices = {s.parent_span_id: s for s in spans if s.name == names.DEVICE}
    turns = sorted((s for s in spans if s.name == names.TURN and s.span_id in devices), key=lambda s: s.start_ns)
    return [DeviceTurn(t, devices[t.span_id]) for t in turns]


def _first(spans: Sequence[SpanRecord], name: str, after: int) -> SpanRecord | None:
    return next((s for s in spans if s.name == name and s.start_ns >= after), None)


def turn_segments(turn: DeviceTurn, services: Sequence[SpanRecord]) -> dict[str, Value]:
    """One turn's row: its first audible and the parts above; ``services`` sorted by start."""
    t, device = turn.turn, turn.device
    spoken = t.event_ns(names.EV_USER_SPEECH_END)
    received = device.event_ns(names.EV_FIRST_AUDIO_RECEIVED)
    audible = device.event_ns(names.EV_FIRST_AUDIBLE)
    inside = [s for s in services if t.start_ns <= s.start_ns <= t.end_ns and s.status_code != names.STATUS_ERROR]
    # from the turn's start, not the user's end of speech: a server may cut the utterance early (its
    # VAD heard a pause), and then ``to_asr_ms`` is negative, which is what happened
    asr = _first(inside, names.ASR, t.start_ns)
    llm = _first(inside, names.LLM_CALL, asr.end_ns if asr else t.start_ns)
    tts = _first(inside, names.TTS, llm.start_ns if llm else t.start_ns)
    first_token = llm.event_ns(names.EV_FIRST_TOKEN) if llm else None
    sentence = _last_chunk_before(llm, tts.start_ns) if llm and tts else None
    row: dict[str, Value] = {
        "question_id": str(t.attributes.get(names.QUESTION_ID, "")),
        "round": t.attributes.get(names.ROUND),  # type: ignore[dict-item]
        "warmup": bool(t.attributes.get(names.WARMUP, False)),
        "ok": bool(t.attributes.get(names.OK, False)),
        "first_audible_ms": _ms(spoken, audible),
        "to_asr_ms": _ms(spoken, asr.start_ns if asr else None),
        "asr_ms": _ms(asr.start_ns, asr.end_ns) if asr else None,
        "asr_to_llm_ms": _ms(asr.end_ns if asr else None, llm.start_ns if llm else None),
        "llm_first_token_ms": _ms(llm.start_ns, first_token) if llm else None,
        "llm_to_sentence_ms": _ms(first_token, sentence),
        "sentence_to_tts_ms": _ms(sentence, tts.start_ns if tts else None),
        "tts_ms": _ms(tts.start_ns, tts.end_ns) if tts else None,
        "tts_to_audio_ms": _ms(tts.end_ns if tts else None, received),
        "device_buffer_ms": _ms(received, audible),
    }
    measured = [row[k] for k in MEASURED]
    total = row["first_audible_ms"]
    ready = total is not None and all(isinstance(v, float) for v in measured)
    row["server_own_ms"] = round(total - sum(measured), 3) if ready else None  # type: ignore[operator, arg-type]
    row["prompt_tokens"] = _int(llm.attributes.get(names.GEN_AI_INPUT_TOKENS)) if llm else None
    row["prompt_cached_tokens"] = _int(llm.attributes.get(names.PROMPT_CACHED_TOKENS)) if llm else None
    return row


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _last_chunk_before(llm: SpanRecord, before: int) -> int | None:
    stamps = [e.time_ns for e in llm.events if e.name in (names.EV_FIRST_TOKEN, EV_CHUNK) and e.time_ns <= before]
    return max(stamps) if stamps else None


def segment_rows(device_spans: Iterable[SpanRecord], service_spans: Iterable[SpanRecord]) -> list[dict[str, Value]]:
    services = sorted(service_spans, key=lambda s: s.start_ns)
    return [turn_segments(turn, services) for turn in device_turns(device_spans)]


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    turns: int  # measured turns (warm-up excluded)
    ok: int
    first_audible_median: float | None
    first_audible_p90: float | None
    medians: dict[str, float | None]  # every segment, server_own_ms and the prompt's tokens, over the ok measured turns


def summarize(rows: Sequence[dict[str, Value]]) -> SegmentSummary:
    measured = [r for r in rows if not r["warmup"]]
    ok = [r for r in measured if r["ok"] and isinstance(r["first_audible_ms"], float)]
    audible = [float(r["first_audible_ms"]) for r in ok]  # type: ignore[arg-type]

    def mid(key: str) -> float | None:
        values = [float(r[key]) for r in ok if isinstance(r[key], (int, float)) and not isinstance(r[key], bool)]  # type: ignore[arg-type]
        return round(median(values), 1) if values else None

    return SegmentSummary(
        turns=len(measured),
        ok=len(ok),
        first_audible_median=round(median(audible), 1) if audible else None,
        first_audible_p90=round(quantile(audible, 0.9), 1) if audible else None,
        medians={key: mid(key) for key in (*SEGMENTS, "server_own_ms", *PROMPT)},
    )
