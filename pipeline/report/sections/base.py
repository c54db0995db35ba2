"""What every section reads (the report's context) and how a section's table rows are laid out.

A section is a function ``(Context) -> list[Block]``: it computes its own numbers, lays out its
own tables and says its own words; what it could not compute it notes in ``ctx.incomplete``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pipeline.analysis.parallel import Aside
from pipeline.records.acoustic import AcousticRow
from pipeline.records.turn_row import TurnRow
from pipeline.report import drift, identity
from pipeline.report.acoustic_match import Acoustic, Match, match
from pipeline.report.cells import NOT_MEASURED
from pipeline.report.conditions import Condition, group, ordered_labels, title
from pipeline.report.document import WARNING, Block, Paragraph
from pipeline.report.load import Dataset, RunInfo
from pipeline.report.runs import RunSummary, run_summaries
from pipeline.report.sweeps import Sweep, read_sweeps

Conditions = dict[str, Condition]
Pair = tuple[str, str]  # (condition, baseline)

MEASURED = "measured"
ESTIMATED = "estimated (derived)"
CITED = "cited"


def comparison_pairs(conds: Conditions) -> list[Pair]:
    """Every other measured condition against A (or, without A, the first measured one); B' against B."""
    present = [label for label, c in conds.items() if c.measured]
    if not present:
        return []
    base = "A" if "A" in present else present[0]
    pairs = [(label, base) for label in present if label != base]
    if "B" in present and "B'" in present and base != "B":
        pairs.append(("B'", "B"))
    return pairs


@dataclass
class Context:
    """The dataset and what several sections share about it, computed once."""

    data: Dataset
    draw: bool
    acoustic: Acoustic | None = None  # rows measured from recordings, where the report was given them
    conds: Conditions = field(init=False)
    labels: list[str] = field(init=False)
    run_summaries: list[RunSummary] = field(init=False)
    check: identity.SettingsCheck = field(init=False)
    drifts: list[drift.Drift] = field(init=False)
    pairs: list[Pair] = field(init=False)
    sweeps: list[Sweep] = field(init=False)  # recorded beside the traces (``sweep.json``)
    sweep_problems: list[str] = field(init=False)
    incomplete: list[str] = field(default_factory=list)  # what could not be computed, for the status line
    _matched: tuple[list[Match], list[tuple[AcousticRow, str]]] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        rows, runs = self.data.rows, self.data.runs
        # the run checks in a forked child (for a large report) while this process groups the rows
        checks = Aside(functools.partial(_checks, rows, runs), len(rows) >= CHECKS_FORK_ROWS)
        try:
            self.conds = group(self.data)
            self.labels = ordered_labels(list(self.conds))
            self.check, self.run_summaries, self.drifts = checks.result()
        finally:
            checks.close()
        self.pairs = comparison_pairs(self.conds) if self.check.comparable else []
        self.sweeps, self.sweep_problems = read_sweeps(self.data.files)

    def matched(self) -> tuple[list[Match], list[tuple[AcousticRow, str]]]:
        """The acoustic rows with their trace turns, and those left unmatched (computed once; none without rows)."""
        if self._matched is None:
            rows = self.acoustic.rows if self.acoustic else ()
            self._matched = match(self.data.rows, rows) if rows else ([], [])
        return self._matched

    @property
    def simulated(self) -> list[RunSummary]:
        return [f for f in self.run_summaries if f.scripted]

    def refused(self, out: list[Block]) -> bool:
        """Whether the comparison was refused (M11); if so, says so in ``out``."""
        if not self.check.comparable:
            out.append(Paragraph("Refused (M11): see Integrity.", WARNING))
        return not self.check.comparable

    def no_pairs(self, what: str) -> str:
        measured = [title(c) for c, cond in self.conds.items() if cond.measured]
        if not measured:
            return f"{what} needs two measured conditions; nothing was measured."
        return f"{what} needs two measured conditions; measured: {', '.join(measured)}."


Section = Callable[[Context], list[Block]]

# From this many turns the context's run checks are made in a forked child (``parallel.Aside``): at
# 100,000 turns (``scripts/bench_report.py``) they took as long as grouping the rows, which this
# process does meanwhile; for a few turns a child's start costs more than it saves.
CHECKS_FORK_ROWS = 5_000


def _checks(
    rows: Sequence[TurnRow], runs: dict[str, RunInfo]
) -> tuple[identity.SettingsCheck, list[RunSummary], list[drift.Drift]]:
    """The runs' settings compared (M11), each run summed up, and its drift checked (M20)."""
    return identity.check(list(runs.values()), rows), run_summaries(rows, runs), drift.check_runs(rows)


def row(
    label: str, labels: Sequence[str], conds: Conditions, cell: Callable[[Condition], str], attr: str
) -> tuple[str, ...]:
    """One table row: a cell per condition (``not measured`` where it has no rows), then the attribution."""
    return (label, *(cell(conds[c]) if c in conds else NOT_MEASURED for c in labels), attr)


def header(first: str, labels: Sequence[str], last: str = "attribution") -> tuple[str, ...]:
    return (first, *(title(c) for c in labels), last)
