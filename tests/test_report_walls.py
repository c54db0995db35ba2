"""The report's walls (DESIGN.md): it reads traces through analysis only, never stages or the
orchestration, and only its ``__main__`` reads the command line or the environment."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "pipeline" / "report"
MODULES = sorted(REPORT.glob("*.py"))
ALLOWED = {
    "pipeline.analysis",
    "pipeline.stats",
    "pipeline.traces_io",
    "pipeline.spans",
    "pipeline.bench_csv",
    "pipeline.textmetrics",
}


def our_imports(path: Path) -> set[str]:
    """Our modules that ``path`` imports; relative imports resolved, ``from pipeline import x`` as ``pipeline.x``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                module = ".".join(["pipeline", "report"][: 3 - node.level] + ([module] if module else []))
            if module in ("pipeline", "pipeline.report", "stages"):
                found.update(f"{module}.{alias.name}" for alias in node.names)
            else:
                found.add(module)
    return {n for n in found if n.split(".")[0] in ("pipeline", "stages")}


def test_the_report_package_exists_with_its_entry_point() -> None:
    assert {p.name for p in MODULES} >= {"__init__.py", "__main__.py", "load.py", "compare.py", "plots.py"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_report_reaches_only_analysis_and_its_own_modules(path: Path) -> None:
    own = {f"pipeline.report.{p.stem}" for p in MODULES} | {"pipeline.report"}
    imported = our_imports(path)
    assert not {n for n in imported if n.startswith("stages")}, f"{path.name} imports a stage"
    assert imported <= ALLOWED | own, f"{path.name} imports {sorted(imported - ALLOWED - own)}"


@pytest.mark.parametrize("path", [p for p in MODULES if p.name != "__main__.py"], ids=lambda p: p.name)
def test_only_the_entry_point_reads_the_command_line_and_environment(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    for word in ("os.environ", "getenv", "sys.argv", "argparse"):
        assert word not in source, f"{path.name} uses {word}"


def test_the_wall_check_sees_forbidden_imports(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from pipeline import turn\nimport stages.vad\nfrom pipeline.clock import VirtualClock\nfrom . import load\n"
    )
    assert our_imports(bad) == {"pipeline.turn", "stages.vad", "pipeline.clock", "pipeline.report.load"}
