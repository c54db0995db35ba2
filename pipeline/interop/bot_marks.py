"""What a voice bot believed against what its caller heard: the bot's own marks beside the device's, per turn.

A bot the lab measures over a wire that carries no turn marks (Twilio's) can still say, in its own log, when it
thought the user stopped speaking and when it started speaking (``scripts/interop/pipecat_app.py`` writes Pipecat's
frames as JSON lines: ``{"t_ns": ..., "stream": ..., "event": ...}``, wall-clock ns on the same machine as the
caller's traces; ``read_marks``). On Pipecat's own wire the bot says it to the caller, in its RTVI messages, which
the caller keeps on its device span as it received them (``told_marks``). Each of a run's turns (from its traces:
the user's end of speech, the answer's first and last audible sample as the caller's phone played them) takes the
bot's marks that fall inside it: from its end of speech (its turn's start, for the user's own marks) to the next
turn's start. So a run of one device at a time, whose turns follow each other, is read exactly; a fleet's turns
overlap, and are not read here.

Per turn, from the user's end of speech: when the bot decided the user had stopped (its end-of-turn delay), when it
believed it started speaking, and when the first audible sample played; the last is the silence a caller hears, and
the difference between the two is what the framework cannot see of itself (its output's pacing, the wire, the
phone's buffer).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.analysis.numbers import median
from pipeline.analysis.traces import ReadProblems, ReadSpan
from pipeline.analysis.turns import group_turns
from pipeline.tracing import names

USER_STOPPED, BOT_STARTED, BOT_STOPPED = "user_stopped_speaking", "bot_started_speaking", "bot_stopped_speaking"


@dataclass(frozen=True, slots=True)
class BotMark:
    """One mark in a bot's log: when (wall-clock ns), on which call, what."""

    t_ns: int
    stream: str
    event: str


@dataclass(frozen=True, slots=True)
class HeardTurn:
    """A caller's turn as its traces tell it: when it started, the user's end of speech, the answer heard."""

    question_id: str
    warmup: bool
    start_ns: int
    speech_end_ns: int | None
    first_audible_ns: int | None
    last_audible_ns: int | None


@dataclass(frozen=True, slots=True)
class TurnBeside:
    """One turn's marks from the user's end of speech (ms; None where there was none): the bot's end of turn, its
    start and end of speaking, and the first and last sample the caller heard."""

    question_id: str
    warmup: bool
    bot_user_stopped_ms: float | None
    bot_started_ms: float | None
    first_audible_ms: float | None
    bot_stopped_ms: float | None
    last_audible_ms: float | None

    @property
    def unseen_ms(self) -> float | None:
        """First audible minus the bot's start of speaking: what the framework does not see of its silence."""
        if self.first_audible_ms is None or self.bot_started_ms is None:
            return None
        return round(self.first_audible_ms - self.bot_started_ms, 3)


def read_marks(path: Path, problems: list[str]) -> list[BotMark]:
    """The bot's marks, in time order; a line that does not read is named in ``problems`` and skipped."""
    marks = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            item = json.loads(line)
            marks.append(BotMark(int(item["t_ns"]), str(item["stream"]), str(item["event"])))
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"{path}:{number}: not a bot mark ({type(exc).__name__}: {exc})")
    return sorted(marks, key=lambda m: m.t_ns)


def heard_turns(spans: Iterable[ReadSpan], problems: ReadProblems) -> list[HeardTurn]:
    """A run's device turns, in the order they started."""
    found = []
    for t in group_turns(spans, problems):
        device = t.first(names.DEVICE)
        found.append(
            HeardTurn(
                str(t.turn.attributes.get(names.QUESTION_ID, "")),
                t.turn.attributes.get(names.WARMUP) is True,
                t.turn.start_ns,
                t.turn.event_ns(names.EV_USER_SPEECH_END),
                device.event_ns(names.EV_FIRST_AUDIBLE) if device is not None else None,
                device.event_ns(names.EV_LAST_AUDIBLE) if device is not None else None,
            )
        )
    return sorted(found, key=lambda h: h.start_ns)


RTVI_NAMES = {  # an RTVI message's type -> the mark it is here
    "user-stopped-speaking": USER_STOPPED,
    "bot-started-speaking": BOT_STARTED,
    "bot-stopped-speaking": BOT_STOPPED,
}


def told_marks(spans: Iterable[ReadSpan]) -> list[BotMark]:
    """The bot's marks its wire told the caller (Pipecat's RTVI messages, on the device spans), in time order."""
    marks = []
    for span in spans:
        if span.name != names.DEVICE:
            continue
        for e in span.events:
            event = RTVI_NAMES.get(str(e.attributes.get(names.BOT_MARK))) if e.name == names.EV_BOT_MARK else None
            if event is not None:
                marks.append(BotMark(e.time_ns, span.span_id, event))
    return sorted(marks, key=lambda m: m.t_ns)


def beside(turns: Sequence[HeardTurn], marks: Sequence[BotMark]) -> list[TurnBeside]:
    """Each turn with the bot's marks that fall inside it (``marks`` in time order)."""
    return [
        _one(turn, turns[i + 1].start_ns if i + 1 < len(turns) else math.inf, marks) for i, turn in enumerate(turns)
    ]


def _one(turn: HeardTurn, until: float, marks: Sequence[BotMark]) -> TurnBeside:
    """``turn`` with the bot's marks from its start (its end of speech, for the bot's speaking) to ``until``."""
    end = turn.speech_end_ns

    def inside(event: str, after: float, before: float) -> list[int]:
        return [m.t_ns for m in marks if m.event == event and after < m.t_ns < before]

    def since(t: int | None) -> float | None:
        return None if t is None or end is None else round((t - end) / 1e6, 3)

    started = inside(BOT_STARTED, end, until)[:1] if end is not None else []
    stopped = inside(BOT_STOPPED, end, until)[-1:] if end is not None else []
    # the bot's last decision that the user had stopped, before it began to answer, is the one that stood
    decided = inside(USER_STOPPED, turn.start_ns, started[0] if started else until)[-1:]
    return TurnBeside(
        turn.question_id,
        turn.warmup,
        since(decided[0] if decided else None),
        since(started[0] if started else None),
        since(turn.first_audible_ns),
        since(stopped[0] if stopped else None),
        since(turn.last_audible_ns),
    )


COLUMNS = (
    "question",
    "bot: user stopped (ms)",
    "bot: started speaking (ms)",
    "heard: first audible (ms)",
    "heard - bot started (ms)",
    "bot: stopped speaking (ms)",
    "heard: last audible (ms)",
)


def markdown(rows: Sequence[TurnBeside], label: str, source: str = "its log") -> str:
    """The turns side by side (warm-up marked), and the medians of the measured ones."""
    cells = [
        [
            r.question_id + (" (warm-up)" if r.warmup else ""),
            *(_ms(v) for v in (r.bot_user_stopped_ms, r.bot_started_ms, r.first_audible_ms, r.unseen_ms)),
            *(_ms(v) for v in (r.bot_stopped_ms, r.last_audible_ms)),
        ]
        for r in rows
    ]
    measured = [r for r in rows if not r.warmup]
    columns = ("bot_user_stopped_ms", "bot_started_ms", "first_audible_ms", "unseen_ms", "bot_stopped_ms")
    medians = [_median([getattr(r, c) for r in measured]) for c in columns]
    cells.append(["median (measured)", *medians, _median([r.last_audible_ms for r in measured])])
    lines = [
        f"### {label}: the bot's own marks beside what the caller heard",
        "",
        f"Every figure from the user's end of speech (the caller's microphone), in ms. The bot's from {source}, the "
        "caller's from its traces; `heard - bot started` is what the framework does not see of the silence.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
        *("| " + " | ".join(row) + " |" for row in cells),
    ]
    return "\n".join(lines) + "\n"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _median(values: Sequence[float | None]) -> str:
    known = [v for v in values if v is not None]
    return _ms(median(known)) if known else "-"
