"""The report: trace files (or Jaeger) -> per-turn rows -> comparison tables, readings and plots.

Modules, in the order data flows through them:

- ``load``, ``jaeger``: trace files, an experiment folder or Jaeger's query API -> a ``Dataset``,
  each turn's facts (its row, per-sentence times, failed stages, what it says of its run) as
  ``pipeline.analysis.read`` makes them from the spans alone, and each run's recorded settings.
- ``sweeps``: sweeps recorded beside the traces (``sweep.json``), held against the runs' own spans.
- ``acoustic_match``: turns measured from recordings (``--acoustic ROWS.csv``), matched to the traces' turns.
- ``conditions``: rows grouped by condition (A, B, B', then any other label).
- ``compare``, ``runs``, ``drift``, ``identity``, ``waterfall``: figures several sections share
  (quantiles with their intervals and differences, per-run summaries, M11 and M20 checks), ``confound``
  (the stages two conditions share, watched: M15), ``silence``
  (end of speech -> first audible sound, one rule for every section), ``cutoffs`` (each end-of-turn
  setting's cut-off rate and silence from the true end, and their frontier; ``cutoffs_by_run``, the same per run
  for ``scripts/interop/xiaozhi_server.py --vad-waits``: a server at several waits); the
  intervals themselves are statistics, ``pipeline.analysis.bootstrap``.
- ``sections/``: one module per section of the report, each owning its numbers, its tables and its
  words; ``build`` lists them in order: ``header`` (title, source, the warnings to see first),
  ``sweep`` (with ``sweep_reading``: which segment grows with the variable), ``capacity`` (how many devices a
  server holds, from a capacity ramp's folder, with ``soak_windows``: a soak's windows and drift), ``result``,
  ``confounding`` (how the conditions were run and whether their shared stages moved), ``cold_warm`` (cold and
  warm turns' silences),
  ``recording_check`` (what the recording says: the traces' silence against the recording's),
  ``endpoint_cost`` (what the silence costs: the users an end-of-turn setting cuts off),
  ``segments``, ``wire``, ``critical_path`` (what moves the silence, and the what-ifs of ``whatif_defaults``),
  ``amplification``, ``dilution`` (with ``neighbours``: each condition's CPU in its unchanged stages),
  ``outcomes`` and ``conclusion`` (with ``centralised``: a shared LLM against each device's own, as
  figures, when a capacity crossover record is there), ``integrity``, ``uncertainty``,
  ``figures``, ``reference``; ``base`` is what every section reads.
- ``apart``: the slowest sections of a large report computed in forked children meanwhile.
- ``document``, ``cells``, ``cited``, ``plots``, ``waveform``: the report's building blocks; ``markdown``,
  ``html``, ``output``: renderings and the files written (report.md, report.html, rows.csv);
  ``__main__`` is the command line.
"""
