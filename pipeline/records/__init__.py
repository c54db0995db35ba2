"""Records: every record the lab writes to disk, one module each, declared once with its typed schema (each
column's type, unit and meaning), its one writer and its one reader. The parts that make a record and the
report that reads it import it from here; this part imports nothing of ours.

- ``schema``: how a record declares its columns (``meta``), its columns read back (``schema``), the docs'
  table of them, and a CSV of records read back cell by cell as each column's type (``read_csv``).
- ``turn``: ``TurnRow``, bench.csv's columns; ``bench_csv``: bench.csv appended to and read back.
- ``whole_lines``: a record file rewritten whole, or appended whole lines or nothing (a full disk).
- ``segment``: ``SegmentRow``, segments.csv (a device turn's first sound in consecutive parts).
- ``path``: ``PathRow``, paths.csv (a turn's two critical paths), and the segment kinds a path is split into.
- ``capacity``: a ramp's ``Capacity`` and ``Step``s (capacity.json) and ``StepRow`` (steps.csv).
- ``soak_result``: a soak's ``Soak``, its ``SoakWindow``s and drift checks (soak.json), ``WindowRow`` (windows.csv).
- ``crossover``: which ramps are a shared LLM and which a device's own (crossover.json).
- ``acoustic``: ``AcousticRow``, a turn measured from a recording (the acoustic rows' CSV).
- ``truth``: ``Truth``, a fixtures folder's truth.csv: where each clip's user really started and finished
  speaking and where they paused, known by construction (written by ``scripts/make_fixtures.py``).
"""
