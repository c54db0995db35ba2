"""Where a report's data comes from: trace files or an experiment folder -> a ``Dataset``.

Rows are always recomputed from the spans by ``pipeline.analysis`` (``read.read_traces``; a
bench.csv found beside the traces is only cross-checked, never trusted over them). The dataset
holds each turn's ``TurnFacts``: its row and what rows cannot hold (every sentence's first-token
time, which stages failed in a failed turn, each run's recorded settings, where queue waits lay,
and a way back to its spans for the waterfall plot: the spans themselves where they were given
in memory, or where in the files they were read).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pipeline.analysis.facts import TurnFacts, facts_of, facts_of_rows, queue_places
from pipeline.analysis.path.graph import TurnGraph
from pipeline.analysis.path.graph_of import graph_if_any
from pipeline.analysis.read import cyclic_gc_paused, read_traces, reread_graph, reread_turn
from pipeline.analysis.traces import ReadProblems, ReadSpan, trace_files
from pipeline.analysis.turns import TurnSpans, group_turns, servers_of
from pipeline.records.bench_csv import csv_line, read_bench_csv
from pipeline.records.turn_row import TurnRow


class LoadError(ValueError):
    """The source cannot be read at all (a missing path, an unreachable server); the message says why."""


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run as recorded in its turn spans."""

    run_id: str
    condition: str
    config_ids: tuple[str, ...]
    config_json: str | None  # None: the traces do not record the settings (older format)
    config_jsons: int  # distinct settings recorded for this run (more than 1 is an inconsistency)
    question_count: int | None = None  # questions per round, as the run recorded it

    def settings(self) -> dict[str, Any] | None:
        """The settings the run recorded, parsed (None where it recorded none, or none that read as a table)."""
        if self.config_json is None:
            return None
        try:
            data = json.loads(self.config_json)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None


@dataclass
class Dataset:
    """Every turn's facts, in turn order, and what was found about the runs and the reading.

    ``rows``, ``sentence_ms`` and ``failed_stages`` are views of the facts, index-aligned with them
    (made once, at first use: the facts are not changed once the dataset is made)."""

    facts: list[TurnFacts]
    turns: list[TurnSpans] | None  # the spans, index-aligned, where they were given in memory (Jaeger, tests)
    runs: dict[str, RunInfo]
    source: str
    files: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    offline_verdicts: list[str] = field(default_factory=list)  # what B' runs' network checks found
    workers: int = 1  # processes that read the trace files
    _graphs: dict[int, TurnGraph | None] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def of_rows(
        cls,
        rows: Sequence[TurnRow],
        source: str,
        sentence_ms: Sequence[tuple[float, ...]] | None = None,
        failed_stages: Sequence[tuple[str, ...]] | None = None,
        runs: dict[str, RunInfo] | None = None,
    ) -> Dataset:
        """A dataset of rows made without spans (a benchmark's synthetic rows, a test's)."""
        return cls(facts_of_rows(rows, sentence_ms, failed_stages), None, runs or {}, source)

    @cached_property
    def rows(self) -> list[TurnRow]:
        return [f.row for f in self.facts]

    @cached_property
    def sentence_ms(self) -> list[tuple[float, ...]]:
        return [f.sentence_ms for f in self.facts]

    @cached_property
    def failed_stages(self) -> list[tuple[str, ...]]:
        return [f.failed for f in self.facts]

    def subset(self, indices: Iterable[int]) -> Dataset:
        """The turns at ``indices`` (their facts, and their spans where kept), with this one's source."""
        idx = list(indices)
        turns = [self.turns[i] for i in idx] if self.turns is not None else None
        return Dataset([self.facts[i] for i in idx], turns, {}, self.source)

    def turn_spans(self, i: int) -> TurnSpans | None:
        """Row ``i``'s turn spans: kept, or read again from the lines they came from; None if neither can be."""
        if self.turns is not None:
            return self.turns[i]
        if self.facts[i].lines:
            return reread_turn(self.facts[i])
        return None

    def queue_places(self, i: int) -> tuple[str, ...]:
        """Where row ``i``'s queue waits lay against its LLM calls (``facts.Q_*``), one per wait: from its
        spans where they are kept, else as found when they were read."""
        return queue_places(self.turns[i]) if self.turns is not None else self.facts[i].queue

    @property
    def from_spans(self) -> bool:
        return self.turns is not None or any(f.span_id for f in self.facts)

    def graph(self, i: int) -> TurnGraph | None:
        """Row ``i``'s dependency graph (``analysis.path``), made from its spans when first asked for: read
        again from their lines, or from the kept turns (then a device's turn with its server's, where both
        are kept). None where its spans give none. Not made while reading: at 100,000 turns building them
        all cost as much as reading, and a report re-times a sample (see ``sections.critical_path``)."""
        if i not in self._graphs:
            self._graphs[i] = self._graph(i)
        return self._graphs[i]

    def _graph(self, i: int) -> TurnGraph | None:
        if self.turns is None:
            return reread_graph(self.facts[i]) if self.facts[i].lines else None
        return graph_if_any(self.turns[i], self._servers.get(self.turns[i].turn.span_id))

    @cached_property
    def _servers(self) -> dict[str, TurnSpans]:
        return servers_of(self.turns or [])

    def csv_lines(self) -> Iterator[str]:
        """The rows as bench.csv lines: made while reading where they were, else now."""
        for f in self.facts:
            yield f.csv_line if f.csv_line is not None else csv_line(f.row)


def _run_infos(facts: Sequence[TurnFacts]) -> dict[str, RunInfo]:
    condition: dict[str, str] = {}
    config_ids: dict[str, dict[str, None]] = {}
    configs: dict[str, dict[str, None]] = {}
    counts: dict[str, int] = {}
    canonical: dict[str, str] = {}  # every turn of a run records the same settings: parse them once
    # each distinct run facts once, in first-seen order (a run's turns mostly share one): the same answer
    for r in dict.fromkeys(f.run for f in facts):
        if r.question_count is not None:
            counts.setdefault(r.run_id, r.question_count)
        condition.setdefault(r.run_id, r.condition)
        config_ids.setdefault(r.run_id, {})[r.config_id] = None
        if r.config_json is not None:
            if r.config_json not in canonical:
                canonical[r.config_json] = _canonical(r.config_json)
            configs.setdefault(r.run_id, {})[canonical[r.config_json]] = None
    return {
        run_id: RunInfo(
            run_id=run_id,
            condition=condition[run_id],
            config_ids=tuple(config_ids[run_id]),
            config_json=next(iter(configs[run_id])) if run_id in configs else None,
            config_jsons=len(configs.get(run_id, {})),
            question_count=counts.get(run_id),
        )
        for run_id in condition
    }


def _canonical(text: str) -> str:
    try:
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return text


def dataset_from_spans(
    spans: Iterable[ReadSpan], problems: ReadProblems, source: str, runs: Sequence[str] = ()
) -> Dataset:
    """Group spans into turns, compute one row per turn, keep the per-turn extras and the spans beside it.

    ``runs``, when given, keeps only those run ids (the others are named in the notes).
    """
    turns = group_turns(spans, problems)
    facts, joined = facts_of(turns)
    by_id = {t.turn.span_id: t for t in turns}
    data = dataset_from_facts(facts, joined, problems.messages, source, runs)
    data.turns = [by_id[f.span_id] for f in data.facts]
    return data


def dataset_from_facts(
    facts: list[TurnFacts], joined: int, problems: Sequence[str], source: str, runs: Sequence[str] = ()
) -> Dataset:
    """The dataset of turns' facts, in their order; ``runs``, when given, keeps only those run ids."""
    said = list(problems)
    notes = []
    if joined:
        notes.append(
            f"{joined} server turn(s) joined to their device's turns (the same traces): they give the device rows "
            "the split of the first sound, and are not counted again as turns of their own"
        )
    if runs:
        wanted = set(runs)
        found = {f.run.run_id for f in facts}
        left_out = sorted(found - wanted)
        missing = sorted(wanted - found)
        if left_out:
            notes.append(f"runs left out as asked: {', '.join(left_out)}")
        if missing:
            said.append(f"asked-for run(s) not found in the traces: {', '.join(missing)}")
        facts = [f for f in facts if f.run.run_id in wanted]
    return Dataset(facts, turns=None, runs=_run_infos(facts), source=source, problems=said, notes=notes)


def _folder_files(path: Path) -> list[Path]:
    """An experiment folder's ``traces/*.jsonl`` or, without that subfolder, every ``*.jsonl`` under it."""
    traces = path / "traces"
    return trace_files(traces) if traces.is_dir() else trace_files(path)


def _bench_check(folder: Path, rows: Sequence[TurnRow], runs: Sequence[str]) -> list[str]:
    """Compare a bench.csv found in the folder with the rows recomputed from the traces
    (only the asked-for runs, when some were asked for)."""
    bench = folder / "bench.csv"
    if not bench.is_file():
        return []
    try:
        stored = read_bench_csv(bench)
    except (OSError, ValueError, KeyError) as exc:
        return [f"{bench}: could not be read for the cross-check ({exc}); the report uses the traces"]

    def key(r: TurnRow) -> tuple[str, str, str]:
        return r.run_id, r.question_id, str(r.round)

    ours = {key(r) for r in rows}
    theirs = {key(r) for r in stored if not runs or r.run_id in runs}
    if ours == theirs:
        return [f"{bench}: same {len(ours)} turn(s) as the traces (the report is computed from the traces)"]
    return [
        f"{bench}: differs from the traces ({len(theirs - ours)} turn(s) only in the CSV, "
        f"{len(ours - theirs)} only in the traces); the report uses the traces"
    ]


def load_paths(
    paths: Sequence[Path],
    runs: Sequence[str] = (),
    workers: int | None = None,
    meanwhile: Callable[[], object] | None = None,
) -> Dataset:
    """Trace files and experiment folders -> dataset. A missing path raises ``LoadError``.

    ``workers``: processes to read the files with (default: one per core when there is much to read);
    ``meanwhile``: as ``read_traces``'s (called once, unless a path is missing)."""
    files: list[Path] = []
    for path in paths:
        if not path.exists():
            raise LoadError(f"{path}: not found")
        files.extend([path] if path.is_file() else _folder_files(path))
    source = ", ".join(str(p) for p in paths)
    with cyclic_gc_paused():
        read = read_traces(files, workers, meanwhile=meanwhile)
        data = dataset_from_facts(read.facts, read.joined, read.problems, source, runs)
    data.workers = read.workers
    data.files = [str(f) for f in files]
    if not files:
        data.problems.insert(0, f"no trace files (*.jsonl) found in {source}")
    for path in paths:
        if path.is_dir():
            data.notes.extend(_bench_check(path, data.rows, runs))
            data.offline_verdicts.extend(_offline_verdicts(path, data.problems))
    return data


def _offline_verdicts(folder: Path, problems: list[str]) -> list[str]:
    """The verdicts of ``python -m pipeline.offline`` found in an experiment folder, in words (M13)."""
    out = []
    for path in sorted(folder.rglob("offline/verdict.json")):
        try:
            v = json.loads(path.read_text(encoding="utf-8"))
            if v["fully_local"] is True:
                out.append(f"{path}: fully local: yes, nothing tried to reach beyond loopback (strace + audit)")
                continue
            if v["fully_local"] is None:
                why = "; ".join(v.get("unknown_because") or ["the check was not completed"])
                out.append(f"{path}: fully local: UNKNOWN ({why}): not shown to run offline")
                continue
            reached = sorted({f"{a['component']} ({a['kind']} {a['destination']})" for a in v["attempts"]})
            out.append(f"{path}: fully local: NO; reached out: {'; '.join(reached[:8])}")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"{path}: unreadable offline verdict ({exc})")
    return out
