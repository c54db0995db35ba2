"""Where a report's data comes from: trace files or an experiment folder -> a ``Dataset``.

Rows are always recomputed from the spans by ``pipeline.analysis.rows`` (a bench.csv found
beside the traces is only cross-checked, never trusted over them). Besides the rows the
dataset keeps what rows cannot hold: every sentence's first-token time, which stages
failed in a failed turn, each run's recorded settings, and the turn spans themselves
(for the waterfall plot).
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.analysis.bench_csv import read_bench_csv
from pipeline.analysis.numbers import Row
from pipeline.analysis.rows import TurnSpans, group_turns, sentence_first_tokens, servers_of, turn_rows
from pipeline.analysis.traces import ReadProblems, SpanRecord, read_trace_file, trace_files
from pipeline.tracing import names


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


@dataclass(slots=True)
class Dataset:
    """Rows and what goes with them, index-aligned: ``sentence_ms[i]`` belongs to ``rows[i]``."""

    rows: list[Row]
    sentence_ms: list[tuple[float, ...]]
    failed_stages: list[tuple[str, ...]]
    turns: list[TurnSpans] | None  # None for rows not read from spans (synthetic benchmarks)
    runs: dict[str, RunInfo]
    source: str
    files: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    offline_verdicts: list[str] = field(default_factory=list)  # what B' runs' network checks found


def failed_stages(turn: TurnSpans) -> tuple[str, ...]:
    """Names of the turn's stage spans that ended in error, first failure first, each once."""
    seen: dict[str, None] = {}
    for child in turn.children:
        if child.status_code == names.STATUS_ERROR:
            seen.setdefault(child.name, None)
    return tuple(seen)


def _run_infos(turns: Sequence[TurnSpans]) -> dict[str, RunInfo]:
    condition: dict[str, str] = {}
    config_ids: dict[str, dict[str, None]] = {}
    configs: dict[str, dict[str, None]] = {}
    counts: dict[str, int] = {}
    canonical: dict[str, str] = {}  # every turn of a run records the same settings: parse them once
    for t in turns:
        a = t.turn.attributes
        run_id = str(a.get(names.RUN_ID) or "")
        count = a.get(names.QUESTION_COUNT)
        if isinstance(count, int) and not isinstance(count, bool):
            counts.setdefault(run_id, count)
        condition.setdefault(run_id, str(a.get(names.CONDITION) or ""))
        config_ids.setdefault(run_id, {})[str(a.get(names.CONFIG_ID) or "")] = None
        recorded = a.get(names.CONFIG_JSON)
        if isinstance(recorded, str) and recorded:
            if recorded not in canonical:
                canonical[recorded] = _canonical(recorded)
            configs.setdefault(run_id, {})[canonical[recorded]] = None
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
    spans: Iterable[SpanRecord], problems: ReadProblems, source: str, runs: Sequence[str] = ()
) -> Dataset:
    """Group spans into turns, compute one row per turn, keep the per-turn extras beside it.

    ``runs``, when given, keeps only those run ids (the others are named in the notes).
    """
    turns = group_turns(spans, problems)
    servers = servers_of(turns)  # before any run is left out: a device's row may need its server's spans
    rows = turn_rows(turns, servers)
    turns, rows, joined = _without_joined_servers(turns, rows, servers)
    notes = []
    if joined:
        notes.append(
            f"{joined} server turn(s) joined to their device's turns (the same traces): they give the device rows "
            "the split of the first sound, and are not counted again as turns of their own"
        )
    if runs:
        wanted = set(runs)
        found = {str(t.turn.attributes.get(names.RUN_ID) or "") for t in turns}
        left_out = sorted(found - wanted)
        missing = sorted(wanted - found)
        if left_out:
            notes.append(f"runs left out as asked: {', '.join(left_out)}")
        if missing:
            problems.add(f"asked-for run(s) not found in the traces: {', '.join(missing)}")
        keep = [i for i, t in enumerate(turns) if str(t.turn.attributes.get(names.RUN_ID) or "") in wanted]
        turns, rows = [turns[i] for i in keep], [rows[i] for i in keep]
    return Dataset(
        rows=rows,
        sentence_ms=[sentence_first_tokens(t) for t in turns],
        failed_stages=[failed_stages(t) for t in turns],
        turns=turns,
        runs=_run_infos(turns),
        source=source,
        problems=list(problems.messages),
        notes=notes,
    )


def _without_joined_servers(
    turns: list[TurnSpans], rows: list[Row], servers: dict[str, TurnSpans]
) -> tuple[list[TurnSpans], list[Row], int]:
    """A server's turn whose device's turn is here too is the same turn seen from the other end."""
    if not servers:
        return turns, rows, 0
    served = {t.turn.span_id for t in servers.values()}
    keep = [i for i, t in enumerate(turns) if t.turn.span_id not in served]
    return [turns[i] for i in keep], [rows[i] for i in keep], len(turns) - len(keep)


def _folder_files(path: Path) -> list[Path]:
    """An experiment folder's ``traces/*.jsonl`` or, without that subfolder, every ``*.jsonl`` under it."""
    traces = path / "traces"
    return trace_files(traces) if traces.is_dir() else trace_files(path)


def _bench_check(folder: Path, rows: Sequence[Row], runs: Sequence[str]) -> list[str]:
    """Compare a bench.csv found in the folder with the rows recomputed from the traces
    (only the asked-for runs, when some were asked for)."""
    bench = folder / "bench.csv"
    if not bench.is_file():
        return []
    try:
        stored = read_bench_csv(bench)
    except (OSError, ValueError, KeyError) as exc:
        return [f"{bench}: could not be read for the cross-check ({exc}); the report uses the traces"]

    def key(r: Row) -> tuple[str, str, str]:
        return str(r.get("run_id")), str(r.get("question_id")), str(r.get("round"))

    ours = {key(r) for r in rows}
    theirs = {key(r) for r in stored if not runs or str(r.get("run_id")) in runs}
    if ours == theirs:
        return [f"{bench}: same {len(ours)} turn(s) as the traces (the report is computed from the traces)"]
    return [
        f"{bench}: differs from the traces ({len(theirs - ours)} turn(s) only in the CSV, "
        f"{len(ours - theirs)} only in the traces); the report uses the traces"
    ]


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Cyclic garbage collection off while a dataset is built (and, in the report command, while the
    report is made from it). None of its records is in a cycle, but a fleet's millions of them set
    off collections again and again, each walking all of them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load_paths(paths: Sequence[Path], runs: Sequence[str] = ()) -> Dataset:
    """Trace files and experiment folders -> dataset. A missing path raises ``LoadError``."""
    files: list[Path] = []
    for path in paths:
        if not path.exists():
            raise LoadError(f"{path}: not found")
        files.extend([path] if path.is_file() else _folder_files(path))
    problems = ReadProblems()
    source = ", ".join(str(p) for p in paths)
    with cyclic_gc_paused():
        spans: list[SpanRecord] = []
        for file in files:
            try:
                spans.extend(read_trace_file(file, problems))
            except OSError as exc:
                problems.add(f"{file}: could not be read ({exc})")
        data = dataset_from_spans(spans, problems, source, runs)
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
