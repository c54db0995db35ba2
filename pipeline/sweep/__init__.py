"""Sweeps (METHOD M15): vary exactly one variable, hold the rest, one run per point.

``python -m pipeline.sweep`` (``__main__``) plans the points (``points``), turns each value into
the settings it overrides (``variables``), runs each point as its own replay (``runner``) and
records the sweep in ``sweep.json`` beside bench.csv (``record``), which the report reads.
"""
