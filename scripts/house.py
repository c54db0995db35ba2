"""The house in numbers: its three counts, the rules the lab's tools (``scripts/``, ``labtools/``) keep, and more.

    python scripts/house.py

- Product modules over 400 lines: every ``.py`` under ``pipeline/``, ``stages/``, ``scripts/`` and ``labtools/``.
- An import back up the layers: one the design's walls do not allow, part by part and entry point by
  entry point (``labtools/walls.py``: ``MAY_USE``, ``ENTRY_MAY_USE``).
- An import circle: modules of ours that import one another, however long the way round, imports inside
  functions counted (a lazy import hides a circle from Python, not from a reader).
- A change to ``sys.path`` in a script or a lab tool: they run against the installed project.
- An import of ``tests`` by a script or a lab tool.
- An import by a script or a lab tool of anything of ours but ``pipeline``, ``stages`` and ``labtools``
  (a sibling script or package): what scripts share lives in ``labtools``.
- A module name or public class name that two rooms of the product use (``labtools.naming``).
- A test file outside the folder that mirrors its package, or named for no module of it
  (``labtools.tests_layout``).

The rules are ``labtools.house``. Each count is listed with its offenders and the script exits non-zero when
any is above zero; ``tests/labtools/test_walls.py`` holds all of them at zero.
"""

from __future__ import annotations

from labtools.house import (
    MOST_LINES,
    circles,
    imports_of_tests,
    imports_up,
    long_modules,
    path_changes,
    sibling_imports,
)
from labtools.naming import repeated_classes, repeated_modules
from labtools.tests_layout import misplaced_tests


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
    rules = {
        "changes to sys.path in scripts and labtools": path_changes(),
        "imports of tests by scripts and labtools": imports_of_tests(),
        "imports by scripts and labtools of ours beyond pipeline, stages and labtools": sibling_imports(),
        "test files outside their package's folder or named for no module of it": misplaced_tests(),
    }
    for title, offences in rules.items():
        print(f"{title}: {len(offences)}")
        for offence in offences:
            print(f"  {offence}")
    names = {"module names": repeated_modules(), "public class names": repeated_classes()}
    for title, found in names.items():
        print(f"repeated {title} across rooms: {len(found)}")
        for name, paths in found.items():
            print(f"  {name}: {', '.join(paths)}")
    return 1 if long or up or loops or any(rules.values()) or any(names.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
