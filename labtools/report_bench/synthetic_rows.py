"""Synthetic rows (A, B, B' in equal parts), and the report made from them alone: its statistics, plots and files."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from labtools.report_bench.machine import python_peak, timed

if TYPE_CHECKING:
    from pipeline.records.turn_row import TurnRow
    from pipeline.report.load import Dataset

QUESTIONS = 30
CONDITIONS = {"A": (520.0, 0.18, 25.0), "B": (300.0, 0.06, 110.0), "B'": (300.0, 0.06, 110.0)}


def synthetic(turns: int, seed: int = 7) -> Dataset:
    """Rows (and per-sentence first tokens) of ``turns`` turns, as analysis would compute them."""
    from pipeline.records.turn_row import TurnRow
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


def report_from_rows(data: Dataset, out: Path) -> float:
    """The report of ``data`` built and written to ``out``, each step timed; the seconds together."""
    from pipeline.report.build import build
    from pipeline.report.output import write

    doc, t_build = timed("statistics, tables and plots", lambda: build(data))
    _, t_write = timed("Markdown, HTML and rows.csv written", lambda: write(doc, data, out))
    total = t_build + t_write
    print(f"  {'total':<44}{total:8.2f} s   ({len(doc.figures())} plots, {len(data.rows)} rows)")
    return float(total)


def rows_step(turns: int, work: Path, trace_memory: bool) -> float:
    """Part 2: the report from ``turns`` synthetic rows; its seconds."""
    data, _ = timed("synthetic rows made (not counted)", lambda: synthetic(turns))
    total = report_from_rows(data, work / "rows")
    if trace_memory:
        from pipeline.report.build import build
        from pipeline.report.output import write

        peak = python_peak(lambda: write(build(data), data, work / "rows-traced"))
        print(f"  {'report Python allocations, peak (tracemalloc)':<44}{peak:8.0f} MiB")
    return total
