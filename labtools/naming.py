"""One name, one meaning: module names and public class names that more than one room of the product uses.

A reader who meets ``sink.py`` or ``Speaker`` should not have to ask which one. Two modules of
``pipeline/``, ``stages/`` or ``labtools/`` share a name when their file names are the same (``__init__`` and
``__main__`` aside); two classes share one when two modules define it (``class X``: a re-export is an
import, not a second class, and a name beginning with ``_`` is private to its module).

``tests/labtools/test_naming.py`` holds both counts at zero, and ``scripts/house.py`` prints them with the
modules named.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

from labtools.house import OURS, ROOT

_NOT_NAMES = frozenset({"__init__", "__main__"})


def _repeated(root: Path, names_in: Callable[[Path], Iterable[str]]) -> dict[str, list[str]]:
    """Name -> the modules of ``OURS`` under ``root`` that carry it (``names_in``), where more than one does."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(p for room in OURS for p in (root / room).rglob("*.py")):
        for name in names_in(path):
            found[name].append(str(path.relative_to(root)))
    return {name: paths for name, paths in sorted(found.items()) if len(paths) > 1}


def repeated_modules(root: Path = ROOT) -> dict[str, list[str]]:
    """Module file name -> the modules that carry it, where more than one does."""
    return _repeated(root, lambda path: () if path.stem in _NOT_NAMES else (path.stem,))


def _public_classes(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n.name for n in tree.body if isinstance(n, ast.ClassDef) and not n.name.startswith("_")]


def repeated_classes(root: Path = ROOT) -> dict[str, list[str]]:
    """Public class name -> the modules that define it, where more than one does (top-level classes)."""
    return _repeated(root, _public_classes)
