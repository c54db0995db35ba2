"""The report: trace files (or Jaeger) -> per-turn rows -> comparison tables, readings and plots.

Modules, in the order data flows through them:

- ``load``, ``jaeger``: trace files, an experiment folder or Jaeger's query API -> a ``Dataset``
  (rows computed by ``pipeline.analysis`` from the spans alone, plus per-sentence times and
  each run's recorded settings).
- ``conditions``: rows grouped by condition (A, B, B', then any other label).
- ``bootstrap``, ``compare``, ``drift``, ``settings``, ``integrity``, ``waterfall``: pure
  statistics and checks (METHOD M2, M3, M7, M11, M16, M17, M20).
- ``tables``, ``readings``, ``build``: the report as a ``document`` of headings, paragraphs,
  tables and figures; ``plots`` draws the figures.
- ``markdown``, ``html``, ``output``: renderings and the files written; ``__main__`` is the
  command line.
"""
