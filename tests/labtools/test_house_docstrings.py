"""Every module of the lab, and every public class in one, says what it is for (STYLE practice 10): the
missing docstrings under ``pipeline/``, ``stages/``, ``scripts/`` and ``labtools/``, listed, no folder exempt."""

from __future__ import annotations

import ast

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
FOLDERS = ("pipeline", "stages", "scripts", "labtools")


def undocumented(source: str, name: str) -> list[str]:
    """``name`` when the module has no docstring, ``name:Class`` for each public top-level class without one."""
    tree = ast.parse(source)
    missing = [] if ast.get_docstring(tree) else [name]
    missing += [
        f"{name}:{node.name}"
        for node in tree.body
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and not ast.get_docstring(node)
    ]
    return missing


def test_the_check_reports_a_module_and_a_class_without_docstrings() -> None:
    source = 'import os\n\n\nclass Public:\n    x = 1\n\n\nclass _Private:\n    pass\n\n\nclass Told:\n    """For."""\n'
    assert undocumented(source, "m.py") == ["m.py", "m.py:Public"]
    assert undocumented('"""For."""\n' + source, "m.py") == ["m.py:Public"]
    assert undocumented("", "__init__.py") == ["__init__.py"]


def test_every_module_and_public_class_has_a_docstring() -> None:
    files = sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))
    assert len(files) > 100  # the walk found the lab, not an empty folder
    missing = [m for p in files for m in undocumented(p.read_text(encoding="utf-8"), p.relative_to(ROOT).as_posix())]
    assert not missing, f"{len(missing)} without a docstring:\n" + "\n".join(missing)
