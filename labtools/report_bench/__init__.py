"""The parts of ``scripts/bench_report.py``, each named for what it holds.

- ``machine``: the machine's state beside every figure: peak memory, load, a fixed piece of work's
  speed, the files warmed into the page cache; steps timed (its load line is
  ``scripts/capacity_ramp_bench.py``'s too).
- ``trace_copies``: the committed fixture traces copied to any number of turns.
- ``fresh_runs``: the report command and ``pipeline.analyze`` measured in fresh interpreters (this
  checkout's code or a baseline's), and the child run that does the measuring.
- ``synthetic_rows``: synthetic rows and the report made from them alone.
"""
