"""The parts of ``scripts/bench_whatif.py``, each named for what it holds.

- ``words``: B0's measured answers, question by question, and the derived question set that has the
  emulated cloud answer A with B's very words.
- ``lanes``: the runs of ``pipeline.replay`` (one, or several interleaved turn by turn) and the stages
  they share, lane against lane; ``scripts/bench_neighbours.py`` runs its lanes with it too.
"""
