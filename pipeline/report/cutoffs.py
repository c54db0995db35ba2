"""End-of-turn settings against the truth: each setting's cut-off rate and silence from the true end, and the
frontier of those no other setting beats on both (M22: the gain named with its cost).

A setting is a condition and a ``config_id`` (every setting that can change a latency, the VAD's among
them), labelled with its VAD: the implementation and its silence, read from the settings its runs recorded
(``lab.config_json``'s ``[vad]``), after the condition where the settings span several, and with its
``config_id`` where two settings' VADs read the same. Only measured turns (M6) whose question carries a truth count
(``cut_off`` not empty; ``pipeline.analysis.endpoint_truth``): a turn without one is never counted as not
cut off, nor given a silence from a true end it does not have.

- cut-off rate: turns whose end-point was declared before the user finished, of the turns with a truth,
  failed turns included (M7: the end-point was declared all the same), with its 95 % Wilson interval;
- silence from the true end: the user really finished -> the first audible sample (a device's
  ``true_end_first_audible_ms``) or the first audio played (in one process, ``true_end_first_audio_ms``),
  over the successful ones; beside it the silence from the end of speech the pipeline's VAD found, the report's
  silence everywhere else (``silence``);
- the end-point delay (true end -> declared, negative when cut off) and the utterances the detector made
  of each whole question.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.analysis.numbers import measured, median
from pipeline.analysis.proportions import Proportion, proportion
from pipeline.records.turn_row import TurnRow
from pipeline.report.conditions import number, ordered_labels, title
from pipeline.report.load import Dataset, RunInfo
from pipeline.report.silence import silence_ms


def has_truth(row: TurnRow) -> bool:
    """The turn's question carries a truth, and the end-point was scored against it."""
    return row.cut_off is not None


def true_end_silence(row: TurnRow) -> float | None:
    """The user really finished -> the first audible sample where the row has it, else the first audio played."""
    audible = number(row.true_end_first_audible_ms)
    return audible if audible is not None else number(row.true_end_first_audio_ms)


def cut_off_rate(rows: Sequence[TurnRow]) -> Proportion | None:
    """Of ``rows``' measured turns with a truth, those cut off, with the interval; None where none has a truth."""
    scored = [r for r in rows if measured(r) and has_truth(r)]
    return proportion(sum(1 for r in scored if r.cut_off), len(scored)) if scored else None


def _sorted(values: Sequence[float | None]) -> np.ndarray:
    return np.sort(np.asarray([v for v in values if v is not None], dtype=np.float64))


@dataclass(frozen=True, slots=True)
class EndSetting:
    """One end-of-turn setting's turns with a truth (measured) and what they give."""

    condition: str
    config_id: str
    label: str
    rows: tuple[TurnRow, ...]
    cut: Proportion
    true_end: np.ndarray  # silence from the true end, successful turns, sorted
    pipeline_end: np.ndarray  # silence from the end of speech the VAD found (``silence``), the same turns, sorted
    delay: np.ndarray  # true end -> end-point declared, sorted
    utterances: tuple[int, ...]

    @property
    def silence(self) -> float | None:
        """The median silence from the true end: the frontier's other axis."""
        return median(self.true_end) if len(self.true_end) else None

    def beats(self, other: EndSetting) -> bool:
        """Lower on both the cut-off rate and the median silence from the true end (a tie beats nothing)."""
        mine, theirs = self.silence, other.silence
        if mine is None or theirs is None:
            return False
        return self.cut.share < other.cut.share and mine < theirs


def beaten_by(setting: EndSetting, settings: Sequence[EndSetting]) -> EndSetting | None:
    """The first of ``settings`` that beats ``setting`` on both, None where none does."""
    return next((o for o in settings if o is not setting and o.beats(setting)), None)


def on_frontier(settings: Sequence[EndSetting]) -> list[bool]:
    """Per setting: no other beats it on both, and it has a silence from the true end to be placed by."""
    return [s.silence is not None and beaten_by(s, settings) is None for s in settings]


def vad_words(vad: Mapping[str, Any]) -> str | None:
    """The recorded ``[vad]`` in a few words: the implementation (and the VAD a turn model stacks on), and how
    long a pause ends the turn; None where the implementation is not recorded."""
    impl = vad.get("impl")
    if not isinstance(impl, str) or not impl:
        return None
    inner = vad.get("inner")
    words = [f"{impl} on {inner}" if isinstance(inner, str) and inner else impl]
    profile = vad.get("profile")
    own = vad.get("xiaozhi_server") if profile == "xiaozhi-server" else vad
    if profile == "xiaozhi-server":
        words[0] += " (xiaozhi-server profile)"
    for key, name in (("silence_ms", "silence"), ("inner_silence_ms", "pause"), ("max_silence_ms", "at most")):
        value = own.get(key) if isinstance(own, Mapping) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            words.append(f"{name} {value:g} ms")
    return ", ".join(words)


def _vad_of(runs: Sequence[RunInfo]) -> str | None:
    found: dict[str, None] = {}
    for run in runs:
        settings = run.settings()
        vad = settings.get("vad") if settings else None
        words = vad_words(vad) if isinstance(vad, Mapping) else None
        if words:
            found[words] = None
    return " / ".join(found) or None


def end_settings(data: Dataset) -> list[EndSetting]:
    """The settings whose measured turns carry a truth: conditions in the report's order, then each
    condition's configs in the order first seen."""
    groups: dict[tuple[str, str], list[TurnRow]] = {}
    run_ids: dict[tuple[str, str], dict[str, None]] = {}
    for row in data.rows:
        if measured(row) and has_truth(row):
            key = (str(row.condition or ""), str(row.config_id))
            groups.setdefault(key, []).append(row)
            run_ids.setdefault(key, {})[str(row.run_id)] = None
    order = ordered_labels([c for c, _ in groups])
    keys = sorted(groups, key=lambda k: order.index(k[0]))  # stable: configs stay in first-seen order
    named = len({c for c, _ in keys}) > 1  # the condition in the label where the settings span several
    labels = {k: _label(k, [data.runs[r] for r in run_ids[k] if r in data.runs], named) for k in keys}
    settings = []
    for key in keys:
        label = labels[key]
        if list(labels.values()).count(label) > 1:  # the same VAD in words, other settings differ
            label += f" (config {key[1] or '-'})"
        settings.append(setting_from(key[0], key[1], label, groups[key]))
    return settings


def setting_from(condition: str, config_id: str, label: str, rows: Sequence[TurnRow]) -> EndSetting:
    """One setting from its turns, however they were grouped (by config here; by run where runs share a config,
    as a device's do against servers of their own): of ``rows`` only the measured turns with a truth count, and at
    least one must (a share of no turns has no interval)."""
    scored = [r for r in rows if measured(r) and has_truth(r)]
    ok = [r for r in scored if r.ok]
    return EndSetting(
        condition=condition,
        config_id=config_id,
        label=label,
        rows=tuple(scored),
        cut=proportion(sum(1 for r in scored if r.cut_off), len(scored)),
        true_end=_sorted([true_end_silence(r) for r in ok]),
        pipeline_end=_sorted([silence_ms(r) for r in ok]),
        delay=_sorted([number(r.endpoint_delay_ms) for r in scored]),
        utterances=tuple(int(u) for r in scored if (u := number(r.utterances)) is not None),
    )


def _label(key: tuple[str, str], runs: Sequence[RunInfo], named: bool) -> str:
    """The VAD in words (else the config, its VAD not recorded), after the condition where ``named``."""
    words = _vad_of(runs) or f"config {key[1] or '-'} (VAD not recorded)"
    return f"{title(key[0])}: {words}" if named else words
