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

Each turn's parts are one typed record, ``SegmentRow``, declared with segments.csv's writer and reader in
``pipeline.records.segment``. The device's turns are read as every reader reads them (``read.read_traces``:
the trace schema checked, turns grouped one way); the services' spans, no turn's, with ``read.read_spans``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from pipeline.analysis.numbers import median, ms, quantile
from pipeline.analysis.read import read_spans, read_traces, reread_turn
from pipeline.analysis.traces import ReadSpan
from pipeline.analysis.turns import TurnSpans
from pipeline.analysis.wire_segment import device_buffer_ms
from pipeline.records.segment import MEASURED, SUMMARIZED, SegmentRow
from pipeline.tracing import names

EV_CHUNK = "chunk"  # the relay's event at every streamed chunk with content after the first


def _first(spans: Sequence[ReadSpan], name: str, after: int) -> ReadSpan | None:
    return next((s for s in spans if s.name == name and s.start_ns >= after), None)


def turn_segments(turn: TurnSpans, device: ReadSpan, services: Sequence[ReadSpan]) -> SegmentRow:
    """One turn's row: its first audible and the parts above; ``device``: its ``device`` span; ``services``
    sorted by start."""
    t = turn.turn
    spoken = t.event_ns(names.EV_USER_SPEECH_END)
    inside = [s for s in services if t.start_ns <= s.start_ns <= t.end_ns and s.status_code != names.STATUS_ERROR]
    # from the turn's start, not the user's end of speech: a server may cut the utterance early (its
    # VAD heard a pause), and then ``to_asr_ms`` is negative, which is what happened
    asr = _first(inside, names.ASR, t.start_ns)
    llm = _first(inside, names.LLM_CALL, asr.end_ns if asr else t.start_ns)
    tts = _first(inside, names.TTS, llm.start_ns if llm else t.start_ns)
    first_token = llm.event_ns(names.EV_FIRST_TOKEN) if llm else None
    sentence = _last_chunk_before(llm, tts.start_ns) if llm and tts else None
    parts = {
        "to_asr_ms": ms(spoken, asr.start_ns if asr else None),
        "asr_ms": ms(asr.start_ns, asr.end_ns) if asr else None,
        "asr_to_llm_ms": ms(asr.end_ns if asr else None, llm.start_ns if llm else None),
        "llm_first_token_ms": ms(llm.start_ns, first_token) if llm else None,
        "llm_to_sentence_ms": ms(first_token, sentence),
        "sentence_to_tts_ms": ms(sentence, tts.start_ns if tts else None),
        "tts_ms": ms(tts.start_ns, tts.end_ns) if tts else None,
        "tts_to_audio_ms": ms(tts.end_ns if tts else None, device.event_ns(names.EV_FIRST_AUDIO_RECEIVED)),
        "device_buffer_ms": device_buffer_ms(device),
    }
    first_audible = ms(spoken, device.event_ns(names.EV_FIRST_AUDIBLE))
    return SegmentRow(
        question_id=str(t.attributes.get(names.QUESTION_ID, "")),
        round=_int(t.attributes.get(names.ROUND)),
        warmup=bool(t.attributes.get(names.WARMUP, False)),
        ok=bool(t.attributes.get(names.OK, False)),
        first_audible_ms=first_audible,
        server_own_ms=_server_own(first_audible, [parts[k] for k in MEASURED]),
        prompt_tokens=_int(llm.attributes.get(names.GEN_AI_INPUT_TOKENS)) if llm else None,
        prompt_cached_tokens=_int(llm.attributes.get(names.PROMPT_CACHED_TOKENS)) if llm else None,
        **parts,
    )


def _server_own(first_audible: float | None, measured: Sequence[float | None]) -> float | None:
    """What is left of first audible once the measured parts are taken out; None unless all are known."""
    if first_audible is None or not all(isinstance(v, float) for v in measured):
        return None
    return round(first_audible - sum(v for v in measured if v is not None), 3)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _last_chunk_before(llm: ReadSpan, before: int) -> int | None:
    stamps = [e.time_ns for e in llm.events if e.name in (names.EV_FIRST_TOKEN, EV_CHUNK) and e.time_ns <= before]
    return max(stamps) if stamps else None


def segment_rows(turns: Iterable[TurnSpans], service_spans: Iterable[ReadSpan]) -> list[SegmentRow]:
    """Each device turn's row (a turn with a ``device`` span), in the turns' order."""
    services = sorted(service_spans, key=lambda s: s.start_ns)
    return [turn_segments(t, device, services) for t in turns if (device := t.first(names.DEVICE)) is not None]


class SegmentsRead(NamedTuple):
    """The device turns' rows read from trace files, in time order, and what could not be read."""

    rows: list[SegmentRow]
    problems: list[str]


def read_segments(device_files: Sequence[Path], service_files: Sequence[Path]) -> SegmentsRead:
    """Each device turn's row from the device's trace files and the services' (``segment_rows``)."""
    read = read_traces(device_files)
    services = read_spans(service_files)
    turns, problems = [], [*read.problems, *services.problems]
    for facts in read.facts:
        turn = reread_turn(facts)  # a turn's spans, read again from its lines (only its facts were kept)
        if turn is None:
            problems.append(f"turn span {facts.span_id}: no longer where it was read (a file changed?)")
        else:
            turns.append(turn)
    return SegmentsRead(segment_rows(turns, services.spans), problems)


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """The measured turns' medians, each part's over the turns that succeeded."""

    turns: int  # measured turns (warm-up excluded)
    ok: int
    first_audible_median: float | None
    first_audible_p90: float | None
    medians: dict[str, float | None]  # every segment, server_own_ms and the prompt's tokens, over the ok measured turns


def summarize(rows: Sequence[SegmentRow]) -> SegmentSummary:
    """The interop table's figures for one run: measured turns, successes, and each part's median."""
    measured = [r for r in rows if not r.warmup]
    ok = [r for r in measured if r.ok and isinstance(r.first_audible_ms, float)]
    audible = [r.first_audible_ms for r in ok if r.first_audible_ms is not None]
    return SegmentSummary(
        turns=len(measured),
        ok=len(ok),
        first_audible_median=round(median(audible), 1) if audible else None,
        first_audible_p90=round(quantile(audible, 0.9), 1) if audible else None,
        medians={key: _median(ok, key) for key in SUMMARIZED},
    )


def _median(rows: Sequence[SegmentRow], key: str) -> float | None:
    found = (getattr(r, key) for r in rows)
    values = [float(v) for v in found if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return round(median(values), 1) if values else None
