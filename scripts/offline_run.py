"""Condition B' from a checkout: the same as ``python -m pipeline.offline`` (see there)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.offline.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main())
