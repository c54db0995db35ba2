"""The house in three numbers: product modules over 400 lines, imports back up the layers, import circles.

    python scripts/house.py

- Product modules: every ``.py`` under ``pipeline/``, ``stages/`` and ``scripts/``.
- An import back up the layers: one the design's walls do not allow, part by part and entry point by
  entry point (``tests/test_walls.py``: ``MAY_USE``, ``ENTRY_MAY_USE``).
- An import circle: modules of ours that import one another, however long the way round, imports inside
  functions counted (a lazy import hides a circle from Python, not from a reader).

Each count is listed and the script exits non-zero when any is above zero; ``tests/test_walls.py`` holds
all three at zero.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.test_walls import MOST_LINES, circles, imports_up, long_modules  # noqa: E402


def main() -> int:
    long, up, loops = long_modules(), imports_up(), circles()
    print(f"product modules over {MOST_LINES} lines: {len(long)}")
    for path, lines in long.items():
        print(f"  {path}: {lines}")
    print(f"imports back up the layers: {len(up)}")
    for line in up:
        print(f"  {line}")
    print(f"import circles: {len(loops)}")
    for group in loops:
        print(f"  {' <-> '.join(group)}")
    return 1 if long or up or loops else 0


if __name__ == "__main__":
    raise SystemExit(main())
