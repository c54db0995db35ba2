"""End-of-turn settings one a run: ``turns.md``, the table of ``scripts/interop/xiaozhi_server.py --vad-waits``.

The report groups turns into settings by ``config_id`` (``cutoffs.end_settings``); a device's runs against
several servers share one config, the device's, so here each run is a setting of its own
(``cutoffs.setting_from``), read from the emulator's run folder: its measured turns with a truth, the cut-off
rate with its 95 % Wilson interval, how the cut-off was seen (``cut_off_by``), the silence from the user's
true end and from the end the device's own VAD found, and the frontier within each condition. A run of the
lab's server is read with that server's traces beside the device's, so the server's declared end-point scores
its turns; the device's traces read alone give its own inference from the server's ``stt`` messages, the one
the real server's rows rely on, and how often the two agree is counted. Each run with a reference (a longer
wait against the shipped one) gets a sentence: what waiting longer buys and what it costs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.analysis.numbers import measured, quantile
from pipeline.analysis.proportions import Proportion
from pipeline.records.turn_row import TurnRow
from pipeline.report.cutoffs import EndSetting, has_truth, on_frontier, setting_from
from pipeline.report.load import load_paths

HEAD = (
    "| run | turns with a truth | cut off | 95 % interval | seen by | from the true end: median | P90 "
    "| from the device's end: median | P90 | frontier |\n"
    "|---|---:|---:|---|---|---:|---:|---:|---:|---|\n"
)


@dataclass(frozen=True, slots=True)
class RunScore:
    """One run's turns against the truth, and what else the table says of it."""

    label: str
    condition: str
    setting: EndSetting | None  # None: no measured turn with a truth
    seen_by: tuple[tuple[str, int], ...]  # how each scored turn's cut-off was seen (cut_off_by), turns
    # (alike, both, declared): the turns the declared end-point scores, those the device's own inference scores
    # too, and those it scores alike; None where no server traces were read
    agreement: tuple[int, int, int] | None
    against: str | None  # the label of the run this one is compared with
    problems: tuple[str, ...] = ()


def device_rows(paths: Sequence[Path]) -> tuple[list[TurnRow], list[str]]:
    """The device's turns of the traces under ``paths`` (a server's, read beside, join them and are left out),
    and what could not be read."""
    data = load_paths(paths)
    return [r for r in data.rows if r.transport], list(data.problems)


def score_run(label: str, condition: str, device: Path, server: Path | None, against: str | None) -> RunScore:
    """A run from its folders: ``device`` the emulator's run folder, ``server`` the server's traces where it
    wrote any (then its declared end scores the turns, and the device's traces alone its own inference)."""
    rows, problems = device_rows([device, server] if server is not None else [device])
    own = device_rows([device])[0] if server is not None else None
    return scored(label, condition, rows, own, against, problems)


def scored(
    label: str,
    condition: str,
    rows: Sequence[TurnRow],
    own: Sequence[TurnRow] | None,
    against: str | None,
    problems: Sequence[str] = (),
) -> RunScore:
    """A run from its rows: ``own``, where given, the same turns scored by the device alone."""
    counted = [r for r in rows if measured(r) and has_truth(r)]
    # the rows share the device's config: the run, not the config, is the setting
    setting = setting_from(condition, counted[0].config_id, label, counted) if counted else None
    seen = Counter(r.cut_off_by or "?" for r in counted)
    return RunScore(
        label, condition, setting, tuple(sorted(seen.items())), agreed(counted, own), against, tuple(problems)
    )


def agreed(rows: Sequence[TurnRow], own: Sequence[TurnRow] | None) -> tuple[int, int, int] | None:
    """Of the turns the server's declared end-point scores, those the device's own inference scores alike, those
    it scores at all (a turn in which the server sent no ``stt`` it cannot), and how many (a turn by its question
    and round)."""
    if own is None:
        return None
    inferred = {_key(r): r.cut_off for r in own if measured(r) and has_truth(r)}
    declared = [r for r in rows if r.cut_off_by == "declared"]
    pairs = [(r.cut_off, inferred[k]) for r in declared if (k := _key(r)) in inferred]
    return sum(1 for mine, theirs in pairs if mine == theirs), len(pairs), len(declared)


def _key(row: TurnRow) -> tuple[str, int]:
    return row.question_id, row.round


def _share(cut: Proportion) -> str:
    return f"{100 * cut.share:.1f} % ({cut.successes} of {cut.n})"


def _ms(values: np.ndarray, q: float) -> str:
    return f"{quantile(values, q):.0f}" if len(values) else "-"


def table_row(score: RunScore, frontier: bool) -> str:
    s = score.setting
    if s is None:
        return f"| {score.label} | 0 | - | - | - | - | - | - | - | - |\n"
    seen = ", ".join(f"{how} {n}" for how, n in score.seen_by)
    cells = [score.label, str(len(s.rows)), _share(s.cut), f"{100 * s.cut.low:.1f}-{100 * s.cut.high:.1f} %", seen]
    cells += [_ms(s.true_end, 0.5), _ms(s.true_end, 0.9), _ms(s.pipeline_end, 0.5), _ms(s.pipeline_end, 0.9)]
    return "| " + " | ".join([*cells, "yes" if frontier else "no"]) + " |\n"


def frontier_marks(scores: Sequence[RunScore]) -> list[bool]:
    """Per run: on its condition's frontier (runs without a truth are on none)."""
    marks = [False] * len(scores)
    for condition in dict.fromkeys(s.condition for s in scores):
        mine = [(i, s.setting) for i, s in enumerate(scores) if s.condition == condition and s.setting is not None]
        for (i, _), mark in zip(mine, on_frontier([setting for _, setting in mine]), strict=True):
            marks[i] = mark
    return marks


def against_sentence(score: RunScore, reference: RunScore) -> str:
    """What waiting as ``score`` does instead of as ``reference``: its cut-off rate and median silence."""
    mine, theirs = score.setting, reference.setting
    if mine is None or theirs is None:
        return f"{score.label} against {reference.label}: not both have turns with a truth."
    told = "" if not mine.cut.overlaps(theirs.cut) else " (the intervals overlap: not told apart at this many turns)"
    cost = "no silence from the true end to compare"
    if mine.silence is not None and theirs.silence is not None:
        cost = (
            f"median silence from the true end {mine.silence:.0f} ms instead of {theirs.silence:.0f} ms "
            f"({mine.silence - theirs.silence:+.0f} ms)"
        )
    cut = f"cut off {_share(mine.cut)} instead of {_share(theirs.cut)}{told}"
    return f"{score.label} against {reference.label}: {cut}; {cost}."


def agreement_line(score: RunScore) -> str | None:
    if score.agreement is None:
        return None
    alike, both, declared = score.agreement
    return (
        f"{score.label}: of {declared} turn(s) the server's declared end-point scores, the device's own inference "
        f"from `stt` scores {both}, {alike} of them alike."
    )


def turns_markdown(scores: Sequence[RunScore], intro: str) -> str:
    """The whole of ``turns.md``: ``intro``, the table, the sentences, the inference check, what was unreadable."""
    marks = frontier_marks(scores)
    text = intro + HEAD + "".join(table_row(s, m) for s, m in zip(scores, marks, strict=True))
    by_label = {s.label: s for s in scores}
    sentences = [against_sentence(s, by_label[s.against]) for s in scores if s.against in by_label]
    if sentences:
        text += "\nWaiting longer:\n\n" + "".join(f"- {line}\n" for line in sentences)
    checks = [line for s in scores if (line := agreement_line(s))]
    if checks:
        text += "\nThe device's inference checked against the declared end-point:\n\n" + "".join(
            f"- {c}\n" for c in checks
        )
    problems = [f"- {s.label}: {p}\n" for s in scores for p in s.problems]
    return text + ("\nRead with problems:\n\n" + "".join(problems) if problems else "")
