"""How long the report takes, and how much memory, for a large experiment.

    .venv/bin/python scripts/bench_report.py [--span-turns 100000] [--baseline DIR] [--turns 100000]
                                             [--no-tracemalloc] [--analyze]

1. From trace files (issue 12: 100,000 turns to a finished report in under 10 s, reading
   included): the committed fixture traces copied (new ids, later rounds, later times) to
   ``--span-turns`` turns, then, in a fresh interpreter, the files read into rows and the whole
   report built and written. The goal is held to that whole process, as a user timing the command
   waits for it (interpreter start, imports and exit included), not to the sum of its steps.
   With ``--baseline DIR``, another checkout of this project (for the code before a change:
   ``git worktree add /tmp/base <commit>``), the same files go through that checkout's code the
   same way, and both are printed side by side with whether their bench.csv and report.md came
   out the same. Before each measured run what was written is flushed to disk and the files are
   read once, both untimed, so no run shares the CPU with the kernel's write-back and both find
   the files in the page cache: on this shared VM reading them from disk took 40 MiB/s one hour
   and the cache 4,500 MiB/s the next, and that is not the report's work. That read's own speed
   is printed beside it.
   With ``--analyze``, ``python -m pipeline.analyze`` of the same files too (each checkout's, in a
   fresh interpreter): its time, CPU time and peak memory, and whether the bench.csv it writes is the
   report's. No goal: it shows what a user recomputing a fleet's rows waits for.
2. From rows: ``--turns`` synthetic turns (A, B, B' in equal parts, 30 questions per round,
   round 1 warm-up, 1 % failures, B and B' with server timings, B with a temperature) built
   directly as bench rows, then the whole report: statistics, plots, Markdown, HTML and
   bench.csv written to a temporary folder. Goal: under 10 s on the 2-core machine.

Peak memory is the process's maximum resident size (``ru_maxrss``) before and after each
step, and, in a separate untimed pass, the peak of Python allocations seen by tracemalloc
during the report (tracemalloc slows allocation down, so its pass is not timed). Every
measurement prints the machine's load average beside it, and, for the trace files, the time a
fixed piece of work no checkout's code takes part in took just before and after it: on this
shared VM the same work ran a third slower some minutes than others, with nothing else
running, and a figure means little without the machine's speed at the time.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# The checkout whose code is measured: this one, or, in a child run for --baseline, the one given.
CODE = Path(os.environ.get("BENCH_REPORT_CODE", str(ROOT)))
sys.path.insert(0, str(CODE))

if TYPE_CHECKING:
    from pipeline.analysis.columns import TurnRow
    from pipeline.report.load import Dataset

QUESTIONS = 30
CONDITIONS = {"A": (520.0, 0.18, 25.0), "B": (300.0, 0.06, 110.0), "B'": (300.0, 0.06, 110.0)}
FIXTURES = ROOT / "tests" / "data" / "report" / "experiment" / "traces"
GOAL_S = 10.0
STEPS = ("read", "build", "write")  # what a child run times, in order
STEP_NAMES = {
    "read": "trace files read, rows computed",
    "build": "statistics, tables and plots",
    "write": "Markdown, HTML and rows.csv written",
}


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def load_text() -> str:
    return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())


# The report's code is imported where it is used, after the path set-up, and not in a --child run:
# that one imports what ``python -m pipeline.report`` imports, when the command does.


def synthetic(turns: int, seed: int = 7) -> Dataset:
    """Rows (and per-sentence first tokens) of ``turns`` turns, as analysis would compute them."""
    from pipeline.analysis.columns import TurnRow
    from pipeline.report.load import Dataset

    rng = np.random.default_rng(seed)
    rows: list[TurnRow] = []
    sentence_ms: list[tuple[float, ...]] = []
    per_condition = math.ceil(turns / len(CONDITIONS))
    for c, (label, (first, spread, per_token)) in enumerate(CONDITIONS.items()):
        n = min(per_condition, turns - c * per_condition)
        calls = rng.integers(1, 4, n)
        sentences = rng.integers(1, 5, n)
        ok = rng.random(n) > 0.01
        for i in range(n):
            k = int(calls[i])
            per_call = first * rng.lognormal(0, spread, k)
            generation = float(per_token * rng.integers(10, 60) * k)
            whole = 600 + 300 + float(per_call.sum()) + 180 + 900 * int(sentences[i]) + 0.2 * generation
            server = label != "A"
            rows.append(
                TurnRow(
                    run_id=f"run-{label}",
                    condition=label,
                    config_id=f"cfg-{c}",
                    question_id=f"q{i % QUESTIONS:02d}",
                    round=i // QUESTIONS + 1,
                    warmup=int(i < QUESTIONS),
                    first_token_ms=round(float(per_call[0]), 3),
                    total_ms=round(float(per_call.sum()) + generation, 3),
                    tokens=40 * k,
                    ok=int(ok[i]),
                    error="" if ok[i] else "timeout",
                    temp_c=round(45 + 10 * i / n, 1) if label == "B" else None,
                    whole_turn_ms=round(whole, 3) if ok[i] else None,
                    llm_calls=k,
                    llm_first_token_ms_per_call=";".join(f"{v:.3f}" for v in per_call),
                    sentences=int(sentences[i]),
                    llm_generation_ms=generation,
                    server_queue_ms=2.0 * k if server else None,
                    server_prompt_ms=round(float(per_call.sum()) - 2.5 * k, 3) if server else None,
                    server_generation_ms=generation - 0.2 * k if server else None,
                    scripted="asr,llm,tts",
                    clock="virtual",
                    turn_start_ns=1_767_225_600_000_000_000 + i * 6_000_000_000,
                )
            )
            sentence_ms.append(
                tuple(round(float(v), 3) for v in first * rng.lognormal(-0.3, spread, int(sentences[i])))
            )
    failed: list[tuple[str, ...]] = [() if r.ok else ("llm.call",) for r in rows]
    return Dataset.of_rows(rows, f"{turns} synthetic turns", sentence_ms, failed)


def _ids(span: dict[str, Any], copy: int) -> None:
    for key in ("traceId", "spanId", "parentSpanId"):
        if span.get(key):
            span[key] = f"{copy:08x}{span[key][8:]}"


def _set(span: dict[str, Any], key: str, value: dict[str, Any]) -> None:
    for a in span["attributes"]:
        if a["key"] == key:
            a["value"] = value


def _moved(raw: bytes, copy: int, length: int) -> bytes:
    """One fixture line as copy ``copy``: new ids, ``copy`` run-lengths later, 3 * ``copy`` rounds on."""
    line = msgspec.json.decode(raw)  # a fresh copy to change
    for span in _spans(line):
        _ids(span, copy)
        for key in ("startTimeUnixNano", "endTimeUnixNano"):
            span[key] = str(int(span[key]) + copy * length)
        for e in span.get("events", []):
            e["timeUnixNano"] = str(int(e["timeUnixNano"]) + copy * length)
        if span["name"] == "turn":
            rnd = next(int(a["value"]["intValue"]) for a in span["attributes"] if a["key"] == "lab.round")
            _set(span, "lab.round", {"intValue": str(rnd + 3 * copy)})
            _set(span, "lab.warmup", {"boolValue": rnd == 1 and copy == 0})
    return msgspec.json.encode(line) + b"\n"  # compact UTF-8, as the exporter writes


def spread_traces(turns: int, folder: Path) -> int:
    """The fixture runs copied until ``turns`` turns: copy k moves 3k rounds on and k run-lengths later."""
    written = 0
    for path in sorted(FIXTURES.glob("*.jsonl")):
        lines = path.read_bytes().splitlines()
        source = [msgspec.json.decode(raw) for raw in lines]
        per_file = math.ceil(turns / 3)
        start = min(int(s["startTimeUnixNano"]) for d in source for s in _spans(d))
        length = max(int(s["endTimeUnixNano"]) for d in source for s in _spans(d)) - start
        with (folder / path.name).open("wb") as out:
            copy, done = 0, 0
            while done < per_file and written < turns:
                for raw in lines[:-1]:  # the session line last, once, is not needed for rows
                    if done >= per_file or written >= turns:
                        break
                    out.write(_moved(raw, copy, length))
                    done += 1
                    written += 1
                copy += 1
    return written


def _spans(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for rs in data["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def timed(label: str, step: Callable[[], Any]) -> tuple[Any, float]:
    before = rss_mib()
    t0 = time.perf_counter()
    result = step()
    seconds = time.perf_counter() - t0
    print(f"  {label:<44}{seconds:8.2f} s   peak RSS {before:7.0f} -> {rss_mib():7.0f} MiB")
    return result, seconds


def report_from_rows(data: Dataset, out: Path) -> float:
    from pipeline.report.build import build
    from pipeline.report.output import write

    doc, t_build = timed("statistics, tables and plots", lambda: build(data))
    _, t_write = timed("Markdown, HTML and rows.csv written", lambda: write(doc, data, out))
    total = t_build + t_write
    print(f"  {'total':<44}{total:8.2f} s   ({len(doc.figures())} plots, {len(data.rows)} rows)")
    return float(total)


def python_peak(step: Callable[[], Any]) -> float:
    tracemalloc.start()
    step()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def rows_step(turns: int, work: Path, trace_memory: bool) -> float:
    data, _ = timed("synthetic rows made (not counted)", lambda: synthetic(turns))
    total = report_from_rows(data, work / "rows")
    if trace_memory:
        from pipeline.report.build import build
        from pipeline.report.output import write

        peak = python_peak(lambda: write(build(data), data, work / "rows-traced"))
        print(f"  {'report Python allocations, peak (tracemalloc)':<44}{peak:8.0f} MiB")
    return total


def child(traces: Path, out: Path) -> None:
    """One measurement, in the fresh interpreter a parent started: the report command a user runs
    (``python -m pipeline.report TRACES --out OUT``), its steps timed; the times as one JSON line."""
    from pipeline.report import __main__ as command

    seconds: dict[str, float] = {}

    def timing(step: str, run: Callable[..., Any]) -> Callable[..., Any]:
        def timed_run(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return run(*args, **kwargs)
            finally:
                seconds[step] = time.perf_counter() - t0

        return timed_run

    for step, name in zip(STEPS, ("load", "build", "write"), strict=True):  # the command's own steps
        setattr(command, name, timing(step, getattr(command, name)))
    loaded = command.load

    def load(*args: Any, **kwargs: Any) -> Any:
        data = loaded(*args, **kwargs)
        readers.append(getattr(data, "workers", 1))  # a checkout before the parallel reading has no such field
        return data

    readers: list[int] = []
    command.load = load
    with contextlib.redirect_stdout(sys.stderr):  # its summary lines: stdout is for the JSON line
        if hasattr(command, "exit_now"):  # as ``python -m pipeline.report`` runs it, its dataset held to the end
            status, _held = command.report([str(traces), "--out", str(out)])
        else:  # a checkout before its fast exit
            status = command.main([str(traces), "--out", str(out)])
    mine = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # forked readers and plot drawing
    cpu = mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime
    result = {
        "seconds": seconds,
        "status": status,
        "cpu": cpu,
        "rss_mib": rss_mib(),
        "child_rss_mib": children.ru_maxrss / 1024,  # the largest child's
        "readers": readers[0],
    }
    print(json.dumps(result))
    if hasattr(command, "exit_now"):
        command.exit_now(0)  # this run's own status is in the JSON line


def warm(traces: Path) -> str:
    """The files read once, so the measured run finds them in the page cache; how fast that read was."""
    t0 = time.perf_counter()
    size = 0
    for path in sorted(traces.iterdir()):
        with path.open("rb") as fh:
            while block := fh.read(1 << 24):
                size += len(block)
    seconds = time.perf_counter() - t0
    return f"{size / 2**20:.0f} MiB read beforehand in {seconds:.2f} s ({size / 2**20 / max(seconds, 1e-9):.0f} MiB/s)"


SPEED_LINES = 2000


def speed_check(traces: Path) -> float:
    """Milliseconds for a fixed piece of work that no checkout's code takes part in (the standard library's
    JSON decoding of the first trace lines, and a walk over their spans): this VM's speed at the moment,
    which moved by a third within minutes in this project's measurements. Lower is faster."""
    first = sorted(traces.iterdir())[0]
    with first.open("rb") as fh:
        found = [line for line in itertools.islice(fh, SPEED_LINES) if line.strip()]
    lines = list(itertools.islice(itertools.cycle(found), SPEED_LINES))  # the same work for a smaller file
    t0 = time.perf_counter()
    for line in lines:
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    {a["key"]: a["value"] for a in span.get("attributes", [])}
    return (time.perf_counter() - t0) * 1000


def ready(traces: Path) -> tuple[str, float]:
    """Before a measured run: what was written flushed, the files in the page cache, the machine's speed."""
    os.sync()  # what an earlier run wrote goes to disk now, not during this one
    return warm(traces), speed_check(traces)


def measure(code: Path, traces: Path, out: Path) -> dict[str, Any]:
    """``code``'s report of ``traces``, in a fresh interpreter (nothing warm but the page cache, nothing shared)."""
    warmed, speed = ready(traces)
    env = {**os.environ, "BENCH_REPORT_CODE": str(code)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(traces), str(out)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["process"] = time.perf_counter() - t0
    result["rows"] = _csv_rows(_rows_file(out))
    result["load"] = load_text()
    result["warmed"] = warmed
    result["speed"] = (speed, speed_check(traces))
    return result


def _rows_file(out: Path) -> Path:
    """The rows a report wrote: rows.csv (bench.csv in a checkout from before that name)."""
    return out / "rows.csv" if (out / "rows.csv").is_file() else out / "bench.csv"


def _csv_rows(path: Path) -> int:
    if not path.is_file():
        return 0
    with path.open(encoding="utf-8") as fh:
        return sum(1 for _ in fh) - 1  # the header


def _same(a: Path, b: Path) -> str:
    if not (a.is_file() and b.is_file()):
        return "not both written"
    return "the same" if a.read_bytes() == b.read_bytes() else "DIFFERENT"


def analyze(code: Path, traces: Path, out: Path) -> dict[str, Any]:
    """``python -m pipeline.analyze TRACES --csv OUT`` with ``code``'s code, in a fresh interpreter: its
    wall time, CPU time and peak resident size (its readers' too: ``wait4`` gives the largest of them)."""
    _, speed = ready(traces)  # as before a report's run
    cmd = [sys.executable, "-m", "pipeline.analyze", str(traces), "--csv", str(out)]
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(code)}  # that checkout's code, whatever the venv was installed from
    child = subprocess.Popen(cmd, cwd=code, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    return {
        "seconds": seconds,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss_mib": usage.ru_maxrss / 1024,
        "status": child.returncode,
        "rows": _csv_rows(out),
        "speed": (speed, speed_check(traces)),
    }


def analyze_step(traces: Path, work: Path, codes: dict[str, Path]) -> None:
    """``pipeline.analyze`` of the same trace files by each checkout, side by side (no goal: for comparison)."""
    runs = {name: analyze(code, traces, work / f"analyze-{i}.csv") for i, (name, code) in enumerate(codes.items())}
    print("python -m pipeline.analyze of the same files, bench.csv written (no goal)")
    print(f"  {'':<44}" + "".join(f"{name:>16}" for name in runs))
    print(f"  {'wall time':<44}" + "".join(f"{r['seconds']:14.2f} s" for r in runs.values()))
    print(
        f"  {'CPU time, its children too (user + system)':<44}" + "".join(f"{r['cpu']:14.2f} s" for r in runs.values())
    )
    print(f"  {'peak RSS (its largest process)':<44}" + "".join(f"{r['rss_mib']:12.0f} MiB" for r in runs.values()))
    for name, r in runs.items():
        before, after = r["speed"]
        print(
            f"  {name}: {r['rows']} rows, exit status {r['status']}; the machine's speed {before:.0f} ms just before, "
            f"{after:.0f} ms just after"
        )
    files = [work / f"analyze-{i}.csv" for i in range(len(runs))]
    print(f"  its bench.csv and the report's of this checkout: {_same(files[0], _rows_file(work / 'after'))}")
    if len(files) > 1:
        print(f"  its bench.csv of this checkout and of the baseline: {_same(files[0], files[1])}")


def spans_step(turns: int, work: Path, baseline: Path | None) -> float:
    """Part 1: trace files -> finished report, this checkout (and the baseline); this one's whole process."""
    traces = work / "traces"
    traces.mkdir()
    written, _ = timed("trace files written (not counted)", lambda: spread_traces(turns, traces))
    # on disk before anything is measured: the kernel writing a gigabyte of dirty pages back in the
    # background took the CPU from the first run measured after it (its speed check: 250 ms, not 140)
    timed("trace files flushed to disk (not counted)", os.sync)
    size = sum(f.stat().st_size for f in traces.iterdir()) / 2**20
    print(f"  {written} turns in {size:.0f} MiB of trace files")
    runs = {"this checkout": measure(CODE, traces, work / "after")}
    if baseline is not None:
        runs["baseline"] = measure(baseline, traces, work / "before")
    print(f"  {'':<44}" + "".join(f"{name:>16}" for name in runs))
    for step in STEPS:
        print(f"  {STEP_NAMES[step]:<44}" + "".join(f"{r['seconds'][step]:14.2f} s" for r in runs.values()))
    totals = {name: float(sum(r["seconds"].values())) for name, r in runs.items()}
    print(f"  {'total, reading included':<44}" + "".join(f"{t:14.2f} s" for t in totals.values()))
    print(
        f"  {'the whole process (start, imports, exit)':<44}"
        + "".join(f"{r['process']:14.2f} s" for r in runs.values())
    )
    print(
        f"  {'CPU time, its children too (user + system)':<44}" + "".join(f"{r['cpu']:14.2f} s" for r in runs.values())
    )
    print(f"  {'processes that read the trace files':<44}" + "".join(f"{r['readers']:16d}" for r in runs.values()))
    print(f"  {'peak RSS':<44}" + "".join(f"{r['rss_mib']:12.0f} MiB" for r in runs.values()))
    print(
        f"  {'peak RSS of its largest child':<44}" + "".join(f"{r['child_rss_mib']:12.0f} MiB" for r in runs.values())
    )
    for name, r in runs.items():
        print(f"  {name}: {r['rows']} rows in its rows file, exit status {r['status']}; {r['load']} after its run")
        print(f"  {name}: {r['warmed']} (not counted)")
        before, after = r["speed"]
        print(
            f"  {name}: the machine's speed, a fixed piece of work ({SPEED_LINES} trace lines decoded by the "
            f"standard library, lower is faster): {before:.0f} ms just before its run, {after:.0f} ms just after"
        )
    if baseline is not None:
        same = _same(_rows_file(work / "after"), _rows_file(work / "before"))
        print(f"  the rows (rows.csv or bench.csv) of this checkout and of the baseline: {same}")
        same = _same(work / "after" / "report.md", work / "before" / "report.md")
        print(f"  report.md of this checkout and of the baseline: {same}")
    # the goal is the command's, as a user times it: start, imports and exit included
    return float(runs["this checkout"]["process"])


def verdict(total: float, what: str) -> str:
    return f"verdict: {'met' if total < GOAL_S else 'MISSED'} the {GOAL_S:.0f} s goal for {what} ({total:.2f} s)"


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        child(Path(sys.argv[2]), Path(sys.argv[3]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--span-turns", type=int, default=100_000, help="0 skips the from-trace-files measurement")
    p.add_argument("--baseline", type=Path, help="another checkout: its code measured on the same trace files")
    p.add_argument("--turns", type=int, default=100_000, help="synthetic rows; 0 skips the from-rows measurement")
    p.add_argument("--no-tracemalloc", action="store_true", help="skip the untimed tracemalloc pass")
    p.add_argument("--analyze", action="store_true", help="also time python -m pipeline.analyze of the trace files")
    args = p.parse_args()
    verdicts = []
    print(f"machine: {os.cpu_count()} CPUs, {load_text()}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.span_turns:
            print(
                f"report from {args.span_turns} turns of trace files, reading included (goal: the whole process "
                f"under {GOAL_S:.0f} s)"
            )
            total = spans_step(args.span_turns, work, args.baseline)
            verdicts.append(verdict(total, f"{args.span_turns} turns from trace files"))
            if args.analyze:
                codes = {"this checkout": CODE, **({"baseline": args.baseline} if args.baseline else {})}
                analyze_step(work / "traces", work, codes)
        if args.turns:
            print(f"report from {args.turns} synthetic rows (goal: under {GOAL_S:.0f} s)")
            total = rows_step(args.turns, work, not args.no_tracemalloc)
            verdicts.append(verdict(total, f"{args.turns} synthetic rows"))
    print("\n".join(verdicts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
