"""How long the report takes, and how much memory, for a large experiment.

    .venv/bin/python scripts/bench_report.py [--turns 100000] [--span-turns 10000] [--no-tracemalloc]

1. From rows: ``--turns`` synthetic turns (A, B, B' in equal parts, 30 questions per round,
   round 1 warm-up, 1 % failures, B and B' with server timings, B with a temperature) built
   directly as bench rows, then the whole report: statistics, plots, Markdown, HTML and
   bench.csv written to a temporary folder. Goal: under 10 s on the 2-core machine.
2. From spans: the committed fixture traces copied (new ids, later rounds, later times) to
   ``--span-turns`` turns, then the same report from those trace files: reading and
   rows included.

Peak memory is the process's maximum resident size (``ru_maxrss``) before and after each
step, and, in a separate untimed pass, the peak of Python allocations seen by tracemalloc
during the report (tracemalloc slows allocation down, so its pass is not timed).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.analysis.numbers import Row  # noqa: E402  (after the path set-up, so it runs from a checkout)
from pipeline.report.build import build  # noqa: E402
from pipeline.report.load import Dataset, load_paths  # noqa: E402
from pipeline.report.output import write  # noqa: E402

QUESTIONS = 30
CONDITIONS = {"A": (520.0, 0.18, 25.0), "B": (300.0, 0.06, 110.0), "B'": (300.0, 0.06, 110.0)}
FIXTURES = ROOT / "tests" / "data" / "report" / "experiment" / "traces"


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def synthetic(turns: int, seed: int = 7) -> Dataset:
    """Rows (and per-sentence first tokens) of ``turns`` turns, as analysis would compute them."""
    rng = np.random.default_rng(seed)
    rows: list[Row] = []
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
                {
                    "run_id": f"run-{label}",
                    "condition": label,
                    "config_id": f"cfg-{c}",
                    "question_id": f"q{i % QUESTIONS:02d}",
                    "round": i // QUESTIONS + 1,
                    "warmup": int(i < QUESTIONS),
                    "first_token_ms": round(float(per_call[0]), 3),
                    "total_ms": round(float(per_call.sum()) + generation, 3),
                    "tokens": 40 * k,
                    "ok": int(ok[i]),
                    "error": "" if ok[i] else "timeout",
                    "temp_c": round(45 + 10 * i / n, 1) if label == "B" else None,
                    "whole_turn_ms": round(whole, 3) if ok[i] else None,
                    "llm_calls": k,
                    "llm_first_token_ms_per_call": ";".join(f"{v:.3f}" for v in per_call),
                    "sentences": int(sentences[i]),
                    "llm_generation_ms": generation,
                    "server_queue_ms": 2.0 * k if server else None,
                    "server_prompt_ms": round(float(per_call.sum()) - 2.5 * k, 3) if server else None,
                    "server_generation_ms": generation - 0.2 * k if server else None,
                    "scripted": "asr,llm,tts",
                    "clock": "virtual",
                    "turn_start_ns": 1_767_225_600_000_000_000 + i * 6_000_000_000,
                }
            )
            sentence_ms.append(
                tuple(round(float(v), 3) for v in first * rng.lognormal(-0.3, spread, int(sentences[i])))
            )
    failed: list[tuple[str, ...]] = [() if r["ok"] else ("llm.call",) for r in rows]
    return Dataset(rows, sentence_ms, failed, None, {}, f"{turns} synthetic turns")


def _ids(span: dict[str, Any], copy: int) -> None:
    for key in ("traceId", "spanId", "parentSpanId"):
        if span.get(key):
            span[key] = f"{copy:08x}{span[key][8:]}"


def _set(span: dict[str, Any], key: str, value: dict[str, Any]) -> None:
    for a in span["attributes"]:
        if a["key"] == key:
            a["value"] = value


def spread_traces(turns: int, folder: Path) -> int:
    """The fixture runs copied until ``turns`` turns: copy k moves 3k rounds on and k run-lengths later."""
    written = 0
    for path in sorted(FIXTURES.glob("*.jsonl")):
        source = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        per_file = math.ceil(turns / 3)
        start = min(int(s["startTimeUnixNano"]) for d in source for s in _spans(d))
        length = max(int(s["endTimeUnixNano"]) for d in source for s in _spans(d)) - start
        with (folder / path.name).open("w", encoding="utf-8") as out:
            copy, done = 0, 0
            while done < per_file and written < turns:
                for data in source[:-1]:  # the session line last, once, is not needed for rows
                    if done >= per_file or written >= turns:
                        break
                    line = json.loads(json.dumps(data))
                    for span in _spans(line):
                        _ids(span, copy)
                        for key in ("startTimeUnixNano", "endTimeUnixNano"):
                            span[key] = str(int(span[key]) + copy * length)
                        for e in span.get("events", []):
                            e["timeUnixNano"] = str(int(e["timeUnixNano"]) + copy * length)
                        if span["name"] == "turn":
                            rnd = next(
                                int(a["value"]["intValue"]) for a in span["attributes"] if a["key"] == "lab.round"
                            )
                            _set(span, "lab.round", {"intValue": str(rnd + 3 * copy)})
                            _set(span, "lab.warmup", {"boolValue": rnd == 1 and copy == 0})
                    out.write(json.dumps(line, separators=(",", ":")) + "\n")
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
    doc, t_build = timed("statistics, tables and plots", lambda: build(data))
    _, t_write = timed("Markdown, HTML and bench.csv written", lambda: write(doc, data, out))
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
        peak = python_peak(lambda: write(build(data), data, work / "rows-traced"))
        print(f"  {'report Python allocations, peak (tracemalloc)':<44}{peak:8.0f} MiB")
    return total


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=100_000)
    p.add_argument("--span-turns", type=int, default=10_000, help="0 skips the from-spans measurement")
    p.add_argument("--no-tracemalloc", action="store_true", help="skip the untimed tracemalloc pass")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        print(f"report from {args.turns} synthetic rows (goal: under 10 s)")
        total = rows_step(args.turns, work, not args.no_tracemalloc)
        if args.span_turns:
            print(f"report from {args.span_turns} turns of trace files (reading and rows included)")
            (work / "traces").mkdir()
            written, _ = timed(
                "trace files written (not counted)", lambda: spread_traces(args.span_turns, work / "traces")
            )
            loaded, t_load = timed(f"{written} turns read, rows computed", lambda: load_paths([work / "traces"]))
            t_report = report_from_rows(loaded, work / "spans")
            print(f"  {'total with reading':<44}{t_load + t_report:8.2f} s")
        print(f"verdict: {'met' if total < 10 else 'MISSED'} the 10 s goal for {args.turns} turns ({total:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
