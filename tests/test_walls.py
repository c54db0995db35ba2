"""The design's walls (DESIGN.md), checked on the imports of every module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module in ("pipeline", "stages"):
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def ours(names: set[str]) -> set[str]:
    return {n for n in names if n.split(".")[0] in ("pipeline", "stages")}


STAGE_FILES = sorted((ROOT / "stages").glob("*.py"))


@pytest.mark.parametrize("path", STAGE_FILES, ids=lambda p: p.name)
def test_stages_never_read_the_clock_or_reach_orchestration(path: Path) -> None:
    found = imports(path)
    assert not found & {"time", "datetime", "opentelemetry", "opentelemetry.trace"}
    assert ours(found) <= {"pipeline.events"} | {f"stages.{p.stem}" for p in STAGE_FILES}
    source = path.read_text(encoding="utf-8")
    assert "loop.time" not in source and "perf_counter" not in source and "monotonic" not in source


@pytest.mark.parametrize("name", ["analysis", "stats", "traces_io", "bench_csv", "summary", "textmetrics"])
def test_analysis_reaches_only_trace_names_and_its_own_modules(name: str) -> None:
    allowed = {"pipeline.spans", "pipeline.traces_io", "pipeline.analysis", "pipeline.stats", "pipeline.textmetrics"}
    assert ours(imports(ROOT / "pipeline" / f"{name}.py")) <= allowed


@pytest.mark.parametrize("name", ["events", "clock", "spans"])
def test_events_clock_and_names_depend_on_nothing_of_ours(name: str) -> None:
    assert ours(imports(ROOT / "pipeline" / f"{name}.py")) == set()


def test_only_entry_points_read_the_environment_and_command_line() -> None:
    entry_points = {"replay.py", "analyze.py", "cloud_emulator_main.py", "experiment.py"}
    for path in sorted((ROOT / "pipeline").glob("*.py")) + STAGE_FILES:
        if path.name in entry_points:
            continue
        source = path.read_text(encoding="utf-8")
        for word in ("os.environ", "getenv", "sys.argv", "argparse"):
            assert word not in source, f"{path.name} uses {word}"
