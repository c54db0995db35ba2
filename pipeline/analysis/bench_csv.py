"""Moved: bench.csv's writer and reader are ``pipeline.records.bench_csv``. These names stay importable from here
for the modules that have not moved to it yet (the tests, scripts and lab tools that name them, and the entry
points and the sweep while they are being changed): import from ``pipeline.records.bench_csv`` in new code."""

from __future__ import annotations

from pipeline.records.bench_csv import BenchCsv, BenchCsvError, bench_run_ids, csv_line, read_bench_csv

__all__ = ["BenchCsv", "BenchCsvError", "bench_run_ids", "csv_line", "read_bench_csv"]
