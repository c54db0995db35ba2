"""Where a test file belongs: in the folder under ``tests/`` that mirrors the package it tests, named for a
module of that package.

``tests/transport/server/test_websocket.py`` tests ``pipeline/transport/server/websocket.py``: a folder under
``tests/`` mirrors ``pipeline/`` (``tests/stages/``, ``tests/labtools/`` and ``tests/scripts/`` mirror those
roots), and a test file's name is ``test_`` and a module or sub-package of that package, with an aspect after
an underscore where one module has several files (``test_websocket_session.py``). Files at the top of
``tests/`` test a top-level module of ``pipeline`` or the repository as a whole, named for what of it they
read (``test_docs.py``, ``test_pyproject_core.py``). Support modules (no ``test_`` prefix) may live anywhere.
"""

from __future__ import annotations

from pathlib import Path

from labtools.house import ROOT

# the roots that tests/ mirrors besides pipeline/, by their folder under tests/
OTHER_ROOTS = ("stages", "labtools", "scripts")


def mirrored(folder: Path, root: Path = ROOT) -> Path:
    """The package a folder of ``tests/`` mirrors: ``tests/stages/vad`` is ``stages/vad``, ``tests/run`` is
    ``pipeline/run``."""
    parts = folder.relative_to(root / "tests").parts
    if parts and parts[0] in OTHER_ROOTS:
        return root.joinpath(*parts)
    return root.joinpath("pipeline", *parts)


def names_in(package: Path) -> set[str]:
    """What a test file in the mirror of ``package`` may be named for: its modules and its sub-packages."""
    if not package.is_dir():
        return set()
    return {p.stem for p in package.iterdir() if p.suffix == ".py" and p.stem != "__init__"} | {
        p.name for p in package.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))
    }


def repository_entries(root: Path = ROOT) -> set[str]:
    """The repository's top-level files and folders by stem, which a test at the top of ``tests/`` may be
    named for (``docs``, ``pyproject``, ``pipeline``)."""
    return {p.stem.lower() for p in root.iterdir() if not p.name.startswith(".")}


def misplaced_tests(root: Path = ROOT) -> list[str]:
    """Each test file under ``tests/`` whose folder mirrors no package, or whose name is no module of it."""
    tests = root / "tests"
    offences = []
    for path in sorted(tests.rglob("test_*.py")):
        package = mirrored(path.parent, root)
        names = names_in(package) | (repository_entries(root) if path.parent == tests else set())
        stem = path.stem.removeprefix("test_")
        where = path.relative_to(root)
        if not package.is_dir():
            offences.append(f"{where}: tests/ mirrors no package at {package.relative_to(root)}")
        elif not any(stem == name or stem.startswith(f"{name}_") for name in names):
            offences.append(f"{where}: named for no module of {package.relative_to(root)}")
    return offences
