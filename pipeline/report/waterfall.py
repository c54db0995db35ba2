"""One turn's stages on one time axis (ms from the end of user speech), for the waterfall plot.

Bars: the VAD end-point wait, ASR, each LLM call (first token marked), each tool run, each
sentence's TTS (first frame marked) and its playback. Playback of sentence i runs from its
first audio frame to the next sentence's (or to the end of playback), so the plot shows
speech of one sentence overlapping the generation and synthesis of the next.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.analysis.numbers import quantile
from pipeline.analysis.traces import ReadSpan
from pipeline.analysis.turns import TurnSpans
from pipeline.records.turn_row import TurnRow
from pipeline.report.conditions import Condition, number
from pipeline.tracing import names


@dataclass(frozen=True, slots=True)
class Bar:
    """One span as a bar on a waterfall lane, with its first token or first frame marked."""

    lane: str
    kind: str  # vad, asr, llm, tool, tts, playback
    start_ms: float
    end_ms: float
    mark_ms: float | None = None  # first token / first frame


@dataclass(frozen=True, slots=True)
class Waterfall:
    """One turn's stages as bars in time, for the waterfall plot."""

    title: str
    bars: tuple[Bar, ...]


def _index(span: ReadSpan, key: str) -> int:
    value = span.attributes.get(key)
    return int(value) if isinstance(value, (int, float)) else 0


def _ms(zero: int, t: int) -> float:
    return (t - zero) / 1e6


def _mark(zero: int, t: int | None) -> float | None:
    return None if t is None else _ms(zero, t)


def bars(turn: TurnSpans) -> list[Bar]:
    """The turn's bars, time zero at the end of user speech (the turn start if it has none)."""
    speech_end = turn.turn.event_ns(names.EV_USER_SPEECH_END)
    zero = turn.turn.start_ns if speech_end is None else speech_end
    out: list[Bar] = []
    vad = turn.first(names.VAD)
    if vad is not None:
        out.append(Bar("VAD end-point", "vad", _ms(zero, max(zero, vad.start_ns)), _ms(zero, vad.end_ns)))
    asr = turn.first(names.ASR)
    if asr is not None:
        out.append(Bar("ASR", "asr", _ms(zero, asr.start_ns), _ms(zero, asr.end_ns)))
    for call in sorted(turn.named(names.LLM_CALL), key=lambda s: _index(s, names.CALL_INDEX)):
        lane = f"LLM call {_index(call, names.CALL_INDEX)} ({call.attributes.get(names.CALL_PURPOSE) or 'call'})"
        first = _mark(zero, call.event_ns(names.EV_FIRST_TOKEN))
        out.append(Bar(lane, "llm", _ms(zero, call.start_ns), _ms(zero, call.end_ns), first))
    for tool in sorted((*turn.spans(names.TOOL), *turn.spans(names.DEVICE_TOOL_CALL)), key=lambda s: s.start_ns):
        where = "device tool" if tool.name == names.DEVICE_TOOL_CALL else "tool"
        lane = f"{where} {tool.attributes.get(names.TOOL_NAME) or ''}".strip()
        out.append(Bar(lane, "tool", _ms(zero, tool.start_ns), _ms(zero, tool.end_ns)))
    for tts in sorted(turn.named(names.TTS), key=lambda s: _index(s, names.SENTENCE_INDEX)):
        lane = f"TTS sentence {_index(tts, names.SENTENCE_INDEX)}"
        first = _mark(zero, tts.event_ns(names.EV_FIRST_FRAME))
        out.append(Bar(lane, "tts", _ms(zero, tts.start_ns), _ms(zero, tts.end_ns), first))
    out.extend(_playback(turn, zero))
    return out


def _playback(turn: TurnSpans, zero: int) -> list[Bar]:
    pb = turn.first(names.PLAYBACK)
    if pb is None:
        return []
    starts = sorted(
        (_event_index(e.attributes.get(names.SENTENCE_INDEX)), e.time_ns)
        for e in pb.events
        if e.name == names.EV_SENTENCE_AUDIO
    )
    if not starts:
        return [Bar("playback", "playback", _ms(zero, pb.start_ns), _ms(zero, pb.end_ns))]
    out = []
    for k, (index, start) in enumerate(starts):
        end = starts[k + 1][1] if k + 1 < len(starts) else pb.end_ns
        out.append(Bar(f"playback sentence {index}", "playback", _ms(zero, start), _ms(zero, end)))
    return out


def _event_index(value: object) -> int:
    return int(value) if isinstance(value, (int, float)) else 0


def representative(cond: Condition, rows: Sequence[TurnRow]) -> int | None:
    """Index (into ``rows``, the dataset's rows ``cond`` was grouped from) of a typical turn that shows
    the overlap best: among measured successful turns whose whole turn lies between the quartiles,
    the one with the most sentences, then the nearest the median, then the earliest."""
    values = cond.values("whole_turn_ms")
    if len(values) == 0:
        return None
    low, median, high = (quantile(values, q) for q in (0.25, 0.5, 0.75))
    best: tuple[int, float, int, int] | None = None
    for i in cond.ok_index:  # the condition's measured successful turns: the rest cannot be chosen
        row = rows[i]
        v = number(row.whole_turn_ms)
        if v is None or not low <= v <= high:
            continue
        sentences = number(row.sentences) or 0
        start = row.turn_start_ns
        key = (-int(sentences), abs(v - median), start if isinstance(start, int) else 0, i)
        if best is None or key < best:
            best = key
    return None if best is None else best[3]
