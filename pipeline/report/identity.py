"""Config identity (METHOD M11): may these runs be compared, and if not, which settings differ?

Each run's full settings are recorded in its turn spans (``lab.config_json``). Two runs may
be compared when they differ only in the variable under study, the condition: where the
LLM runs. So the settings that say which LLM backend serves the turn and how that backend
is set (``CONDITION_DEFINING``: ``llm.impl`` and the backend's own keys, ``[cloud]``,
``[network]``) may differ between conditions; every other setting (VAD, ASR, TTS, sentence
splitting, pacing, clock, time limit, the settings' version, and the LLM role's own: call
mode, output limit, history, tools, temperature, seed, the pretend device's tool latency)
must be equal, and so must the question set and its order (M5). Runs of the *same*
condition must agree on everything: they are pooled. Rounds and the question limit are not part of
``config_id`` and never block a comparison; different round counts get a warning (M9).

A run whose settings were not recorded (an older trace format) cannot be shown to differ
only in the condition, so it is not compared with runs of another config_id.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.records.turn_row import TurnRow
from pipeline.report.load import RunInfo

IGNORED = ("run.rounds", "run.limit")
CONDITION_DEFINING = (
    "run.condition",
    "llm.*",
    "cloud.*",
    "network.*",
)
# The LLM role's own settings (``[llm]``'s, ``pipeline.settings.stage_sections.LlmConfig``): asked of every
# backend, so held equal across conditions. Every other ``llm.*`` key is the backend's own (``model``, llama's
# ``n_ctx``, a scripted ``latency``, a new backend's new option) and comes with the condition.
HELD_ACROSS_CONDITIONS = (
    "llm.mode",
    "llm.max_tokens",
    "llm.max_calls",
    "llm.tools",
    "llm.temperature",
    "llm.seed",
    "llm.history_rounds",
    "llm.tool_latency.*",
)


@dataclass(frozen=True, slots=True)
class Difference:
    """A setting that differs between runs, and whether the comparison allows it (M11)."""

    setting: str
    values: tuple[tuple[str, str], ...]  # (run_id, value as JSON), in run order
    allowed: bool  # condition-defining and between different conditions


@dataclass(frozen=True, slots=True)
class SettingsCheck:
    """Whether runs may be compared on their recorded settings (M11): what differs, why not, what to know."""

    comparable: bool
    differences: tuple[Difference, ...]
    reasons: tuple[str, ...]  # why not comparable
    warnings: tuple[str, ...]


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"llm": {"latency": {"first_ms": 350}}}`` -> ``{"llm.latency.first_ms": "350"}``."""
    out: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return out


def condition_defining(setting: str) -> bool:
    """A setting that may differ between conditions (where the LLM runs, and how that backend is set)."""

    def matches(patterns: tuple[str, ...]) -> bool:
        return any(fnmatch.fnmatchcase(setting, pattern) for pattern in patterns)

    return matches(CONDITION_DEFINING) and not matches(HELD_ACROSS_CONDITIONS)


def _settings(run: RunInfo) -> dict[str, str] | None:
    data = run.settings()
    return {k: v for k, v in flatten(data).items() if k not in IGNORED} if data is not None else None


def differences(runs: Sequence[RunInfo]) -> list[Difference]:
    """Every setting whose value is not the same in all runs that recorded their settings."""
    recorded = [(run, s) for run in runs if (s := _settings(run)) is not None]
    keys = sorted({k for _, s in recorded for k in s})
    out = []
    for key in keys:
        values = tuple((run.run_id, s.get(key, "(absent)")) for run, s in recorded)
        if len({v for _, v in values}) < 2:
            continue
        out.append(Difference(key, values, condition_defining(key) and _same_condition_agree(key, recorded)))
    return out


def _same_condition_agree(key: str, recorded: Sequence[tuple[RunInfo, dict[str, str]]]) -> bool:
    by_condition: dict[str, set[str]] = {}
    for run, s in recorded:
        by_condition.setdefault(run.condition, set()).add(s.get(key, "(absent)"))
    return all(len(values) == 1 for values in by_condition.values())


def _question_orders(rows: Sequence[TurnRow]) -> dict[str, tuple[str, ...]]:
    """Each run's questions in the order of its first round (its first device's: several devices
    ask the set rotated, interleaved in time, and the device count is a setting of its own)."""
    firsts: dict[str, tuple[int, list[tuple[int, str]]]] = {}
    for row in rows:
        if row.device not in (None, "", 0):
            continue
        run = str(row.run_id)
        rnd = row.round
        rnd = rnd if isinstance(rnd, int) else 0
        start = row.turn_start_ns
        entry = (start if isinstance(start, int) else 0, str(row.question_id))
        current = firsts.get(run)
        if current is None or rnd < current[0]:
            firsts[run] = (rnd, [entry])
        elif rnd == current[0]:
            current[1].append(entry)
    return {run: tuple(q for _, q in sorted(entries)) for run, (_, entries) in firsts.items()}


def _rounds(rows: Sequence[TurnRow]) -> dict[str, int]:
    out: dict[str, set[object]] = {}
    for row in rows:
        out.setdefault(str(row.run_id), set()).add(row.round)
    return {run: len(r) for run, r in out.items()}


def check(runs: Sequence[RunInfo], rows: Sequence[TurnRow]) -> SettingsCheck:
    reasons: list[str] = []
    warnings: list[str] = []
    if len({cid for run in runs for cid in run.config_ids}) <= 1:
        return SettingsCheck(True, (), (), tuple(_round_warnings(rows)))
    for run in runs:
        if run.config_json is None:
            reasons.append(
                f"run {run.run_id} does not record its settings (older trace format, no lab.config_json): "
                "it cannot be shown to differ from the others only in the condition"
            )
        if run.config_jsons > 1:
            reasons.append(f"run {run.run_id} recorded {run.config_jsons} different settings in its turns")
        if len(run.config_ids) > 1:
            reasons.append(f"run {run.run_id} has turns with {len(run.config_ids)} config_ids")
    found = differences(runs)
    blocking = [d.setting for d in found if not d.allowed]
    if blocking:
        reasons.append(f"settings other than the condition differ: {', '.join(blocking)}")
    orders = _question_orders(rows)
    if len(set(orders.values())) > 1:
        reasons.append(
            "question set or order differs (M5): "
            + "; ".join(f"{run}: {', '.join(q) or '(none)'}" for run, q in orders.items())
        )
    warnings.extend(_round_warnings(rows))
    return SettingsCheck(not reasons, tuple(found), tuple(reasons), tuple(warnings))


def _round_warnings(rows: Sequence[TurnRow]) -> list[str]:
    rounds = _rounds(rows)
    if len(set(rounds.values())) > 1:
        listed = ", ".join(f"{run}: {n}" for run, n in rounds.items())
        return [f"runs have different numbers of rounds (M9 asks for the same): {listed}"]
    return []
