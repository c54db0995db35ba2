"""The lab's tools: what the scripts under ``scripts/`` share, and the house rules the scripts and the product keep.

A script runs as ``python scripts/X.py`` against the installed project and imports nothing of ours but
``pipeline``, ``stages`` and this package (``house`` holds it to that); ``labtools`` imports only
``pipeline``, ``stages`` and its own modules, and no product module imports it.

- ``house``: the house rules read from the source (the walls on every import, modules over 400 lines,
  import circles, the scripts' own rules) and their counts; ``scripts/house.py`` prints them.
- ``walls``: the design's walls as tables, which part of the product may import which.
- ``tests_layout``: where a test file belongs (the folder mirroring its package, named for its module).
- ``cloud_turns``: condition A's turns against the emulated cloud, their rows from the traces (the cloud
  tests and ``scripts/bench_network.py``).
- ``heard``: a recording of the room read against the traces (``tests/acoustic/test_sound_e2e.py`` and
  ``scripts/bench_sound.py``).
- ``transport_skews``: ``pipeline.serve`` started and stopped for a bench, and the skews measured from real
  runs (``scripts/bench_transport.py --parts skews``).
- ``git_worktree``: the project at a git ref, checked out beside this one for a bench's ``--before`` run.
- ``pyspy_top``: a py-spy raw profile summarised (``scripts/capacity_ramp_bench.py --profile``).
- ``report_bench/``: the parts of ``scripts/bench_report.py``.
- ``whatif_bench/``: the parts of ``scripts/bench_whatif.py``.
- ``script_module``: a script loaded from its file, for a test of the logic it keeps to itself.
- ``fixture_voices``: the voices that speak ``audio_fixtures/``, the judge that picks a take, and where clean
  synthesized speech starts, stops and pauses (``scripts/make_fixtures.py``).
"""
