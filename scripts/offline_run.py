"""Condition B' from a checkout: the same as ``python -m pipeline.offline`` (see there)."""

from __future__ import annotations

from pipeline.offline.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main())
