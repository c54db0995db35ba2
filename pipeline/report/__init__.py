"""The report: trace files (or Jaeger) -> per-turn rows -> comparison tables, readings and plots.

Modules, in the order data flows through them:

- ``load``, ``jaeger``: trace files, an experiment folder or Jaeger's query API -> a ``Dataset``,
  each turn's facts (its row, per-sentence times, failed stages, what it says of its run) as
  ``pipeline.analysis.read`` makes them from the spans alone, and each run's recorded settings.
- ``sweeps``: sweeps recorded beside the traces (``sweep.json``), held against the runs' own spans.
- ``conditions``: rows grouped by condition (A, B, B', then any other label).
- ``bootstrap``, ``compare``, ``runs``, ``drift``, ``settings``, ``waterfall``: figures several
  sections share (intervals, differences, per-run summaries, M11 and M20 checks).
- ``sections/``: one module per section of the report (sweep, result, segments, wire,
  amplification, dilution, outcomes and conclusion, integrity, uncertainty, figures, reference),
  each owning its numbers, its tables and its words; ``build`` lists them in order.
- ``document``, ``cells``, ``cited``, ``plots``: the report's building blocks; ``markdown``,
  ``html``, ``output``: renderings and the files written (report.md, report.html, rows.csv);
  ``__main__`` is the command line.
"""
