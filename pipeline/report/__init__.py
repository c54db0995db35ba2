"""The report: trace files (or Jaeger) -> per-turn rows -> comparison tables, readings and plots.

Modules, in the order data flows through them:

- ``load``, ``jaeger``: trace files, an experiment folder or Jaeger's query API -> a ``Dataset``
  (rows computed by ``pipeline.analysis`` from the spans alone, plus per-sentence times and
  each run's recorded settings).
- ``conditions``: rows grouped by condition (A, B, B', then any other label).
- ``bootstrap``, ``compare``, ``runs``, ``drift``, ``settings``, ``waterfall``: figures several
  sections share (intervals, differences, per-run facts, M11 and M20 checks).
- ``sections/``: one module per section of the report (result, segments, amplification,
  dilution, outcomes and conclusion, integrity, uncertainty, figures, reference), each owning
  its numbers, its tables and its words; ``build`` lists them in order.
- ``document``, ``cells``, ``plots``: the report's building blocks; ``markdown``, ``html``,
  ``output``: renderings and the files written; ``__main__`` is the command line.
"""
