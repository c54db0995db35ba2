"""Moved: capacity.json and steps.csv are the capacity record, ``pipeline.records.ramp_result``. These names stay
importable from here for the ramp (``capacity.ramp``) while it is being changed: import from
``pipeline.records.ramp_result`` in new code."""

from __future__ import annotations

from pipeline.records.ramp_result import Capacity, Step, write

__all__ = ["Capacity", "Step", "write"]
