"""Moved: capacity.json and steps.csv are the capacity record, ``pipeline.records.capacity``. These names stay
importable from here for the ramp (``capacity.ramp``) while it is being changed: import from
``pipeline.records.capacity`` in new code."""

from __future__ import annotations

from pipeline.records.capacity import Capacity, Step, write

__all__ = ["Capacity", "Step", "write"]
