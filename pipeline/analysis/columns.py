"""Moved: the turn record is ``pipeline.records.turn_row``. These names stay importable from here for the modules
that have not moved to it yet (the tests, scripts and lab tools that name them, and the capacity ramp and the
sweep while they are being changed): import from ``pipeline.records.turn_row`` in new code."""

from __future__ import annotations

from pipeline.records.turn_row import COLUMNS, TurnRow, column

__all__ = ["COLUMNS", "TurnRow", "column"]
