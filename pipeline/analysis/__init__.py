"""Analysis: trace files -> turn facts -> typed records (declared in ``pipeline.records``, with their CSV
files); statistics, text metrics, what-ifs.

Modules, in the order data flows through them:

- ``traces``: trace files (OTLP JSON lines) or a decoded line -> what was read (``ReadSpan``).
- ``turns``: spans -> turns (a turn span and its children), a device's turn joined to its server's.
- ``rows``: one turn -> its row; ``wire_segment``: the split of a device's first sound (and the device's buffer,
  derived once); ``textmetrics``: ASR error rate, answer keywords; ``endpoint_truth``: the end-point against
  the question's truth (cut off, utterances, end-point delay, the silence from the true end of speech).
- ``facts``: turns -> each turn's facts (its row and what the report keeps beside it; on request its
  dependency graph).
- ``read``: the one way in: ``read_traces`` (trace files -> every turn's facts, read by a forked
  process per core for a large read, ``parallel``), ``rows_from_spans`` for spans in memory, a turn's
  spans read again from its lines, ``read_spans`` for spans that are no turn's.
- ``row_sink``: a run's rows written to bench.csv as each turn finishes.
- ``numbers``, ``stats``, ``summary``, ``bootstrap``: the one quantile, "measured turn" and ns -> ms,
  statistics, the end-of-run table, bootstrap intervals (M8), ``proportions`` (a share with its Wilson
  interval); ``shared_stages``: a stage two runs share,
  run against run, and the machine's speed followed over interleaved runs (M15).
- ``path/``: a turn's dependency graph, its critical paths and its paths.csv row (``PathRow``); ``retiming``:
  the graph re-timed with a change, ``read_graphs`` for ``pipeline.whatif``.
- ``server_segments``: a real server's segments of first sound (``SegmentRow``, segments.csv).
- ``crossing``: centralised against distributed (M21 (3)): the crossing of a shared LLM's silence curve
  with a device's own, computed from the capacity ramps a crossover record names.
- ``sweep_file``: sweep.json, read once for the sweep and the report.
- ``recording_marks``: a device's traced moments placed in its ``--record-audio`` recording, beside what
  the recording holds there (a check, never the acoustic measurement).
"""
