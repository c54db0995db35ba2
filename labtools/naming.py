"""One name, one meaning: module names and public class names that more than one room of the product uses.

A reader who meets ``sink.py`` or ``Speaker`` should not have to ask which one. Two modules of
``pipeline/``, ``stages/`` or ``labtools/`` share a name when their file names are the same (``__init__`` and
``__main__`` aside); two classes share one when two modules define it (``class X``: a re-export is an
import, not a second class, and a name beginning with ``_`` is private to its module).

``tests/test_names.py`` holds both counts at zero, and ``scripts/house.py`` prints them with the modules named.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("pipeline", "stages", "labtools")
_NOT_NAMES = frozenset({"__init__", "__main__"})


def _modules(root: Path) -> list[Path]:
    return sorted(p for room in ROOMS for p in (root / room).rglob("*.py"))


def repeated_modules(root: Path = ROOT) -> dict[str, list[str]]:
    """Module file name -> the modules that carry it, where more than one does."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in _modules(root):
        if path.stem not in _NOT_NAMES:
            found[path.stem].append(str(path.relative_to(root)))
    return {name: paths for name, paths in sorted(found.items()) if len(paths) > 1}


def repeated_classes(root: Path = ROOT) -> dict[str, list[str]]:
    """Public class name -> the modules that define it, where more than one does (top-level classes)."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in _modules(root):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found[node.name].append(str(path.relative_to(root)))
    return {name: paths for name, paths in sorted(found.items()) if len(paths) > 1}
