"""Analysis: trace files -> per-turn rows -> bench.csv; statistics, text metrics and the summary table."""
