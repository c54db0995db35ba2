"""Analysis: trace files -> per-turn rows -> bench.csv; statistics, text metrics and the summary table.

Modules, in the order data flows through them:

- ``traces``: trace files (OTLP JSON lines) or a decoded line -> span records.
- ``turns``: spans -> turns (a turn span and its children), a device's turn joined to its server's.
- ``rows``: one turn -> its row; ``columns``: the row's one declaration (bench.csv's columns);
  ``wire``: the split of a device's first sound; ``textmetrics``: ASR error rate, answer keywords.
- ``facts``: turns -> each turn's facts (its row and what the report keeps beside it).
- ``read``: the one way in: ``read_traces`` (trace files -> every turn's facts, read by a forked
  process per core for a large read, ``parallel``), ``rows_from_spans`` for spans in memory.
- ``bench_csv``: rows <-> bench.csv; ``sink``: a run's rows written as each turn finishes.
- ``numbers``, ``stats``, ``summary``: the one quantile and "measured turn", statistics, the
  end-of-run table; ``server_segments``: a real server's own segments.
"""
