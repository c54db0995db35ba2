"""The layout a newcomer reads: each part's ``__init__`` names every module in its folder (its map), and no
module of the reading side is so long that it holds several ideas (DESIGN: small modules named for what
they hold)."""

from __future__ import annotations

import ast

import pytest

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
# a package -> the folders whose modules its map names
MAPS = {
    "pipeline/acoustic": ("pipeline/acoustic",),
    "pipeline/analysis": ("pipeline/analysis",),
    "pipeline/analysis/path": ("pipeline/analysis/path",),
    "pipeline/capacity": ("pipeline/capacity",),
    "pipeline/plan": ("pipeline/plan",),
    "pipeline/report": ("pipeline/report", "pipeline/report/sections"),
    "pipeline/sweep": ("pipeline/sweep",),
    "pipeline/transport/wire": ("pipeline/transport/wire",),
    "pipeline/transport/server": ("pipeline/transport/server",),
    "pipeline/transport/device": ("pipeline/transport/device",),
}


@pytest.mark.parametrize("package", sorted(MAPS))
def test_every_module_is_named_in_its_packages_map(package: str) -> None:
    text = ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text(encoding="utf-8"))) or ""
    modules = {p.stem for folder in MAPS[package] for p in (ROOT / folder).glob("*.py")} - {"__init__", "__main__"}
    modules |= {p.parent.name + "/" for p in (ROOT / package).glob("*/__init__.py")}  # sub-packages
    missing = sorted(m for m in modules if f"``{m}``" not in text)
    assert not missing, f"{package}/__init__.py does not name {missing}"


MOST_LINES = 400
# the reading side of the lab and the scripts that measure it (transport and the run are sized apart)
SIZED = (
    *("pipeline/analysis", "pipeline/report", "pipeline/sweep", "pipeline/tracing", "pipeline/interop"),
    *("pipeline/offline", "labtools/report_bench", "labtools/whatif_bench"),
)
SIZED_FILES = ("pipeline/whatif.py", "pipeline/analyze.py", "scripts/bench_report.py", "scripts/bench_whatif.py")


def test_no_module_of_the_reading_side_is_over_400_lines() -> None:
    files = [p for folder in SIZED for p in (ROOT / folder).rglob("*.py")] + [ROOT / f for f in SIZED_FILES]
    long = {
        str(p.relative_to(ROOT)): n
        for p in files
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MOST_LINES
    }
    assert not long, long
