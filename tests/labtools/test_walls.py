"""The design's walls (docs/design.md), checked by part on the imports of every module, and the house's
counts held at zero.

A module's part is the folder it lives in (``pipeline/run/`` is the run, ``stages/`` the stages...), so a new
module is checked the moment it exists; nothing here lists files. The rules themselves (the walls' tables,
the import reading, the counts) are ``labtools.house``, which ``scripts/house.py`` prints from too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from labtools.house import (
    ENTRY_MAY_USE,
    ENTRY_POINTS,
    MAY_USE,
    MODULES,
    ROOT,
    _strongly_connected,
    allowed_parts,
    circles,
    imports_of_tests,
    imports_of_tests_in,
    imports_up,
    long_modules,
    module_name,
    our_imports,
    part,
    path_changes,
    path_changes_in,
    sibling_imports,
    sibling_imports_in,
)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_every_part_imports_only_what_it_may(path: Path) -> None:
    name = module_name(path)
    mine, allowed = part(name), allowed_parts(name)
    wrong = sorted(m for m in our_imports(path) if part(m) not in allowed)
    assert not wrong, f"{module_name(path)} ({mine}) imports {wrong}; {mine} may use {sorted(allowed)}"


def test_no_part_may_use_a_part_that_may_use_it_back() -> None:
    """The allowed imports form no circle, however long (so the imports they allow can form none across parts)."""

    def circle_from(start: str, path: tuple[str, ...]) -> tuple[str, ...]:
        for nxt in sorted(MAY_USE.get(path[-1], set()) - {path[-1]}):
            if nxt == start:
                return (*path, start)
            if nxt not in path and (found := circle_from(start, (*path, nxt))):
                return found
        return ()

    circles = [circle_from(p, (p,)) for p in MAY_USE]
    assert not any(circles), " -> ".join(next(c for c in circles if c))


STAGE_MODULES = {module_name(p): p for p in (ROOT / "stages").rglob("*.py")}


def test_no_module_in_stages_imports_in_a_circle() -> None:
    """Imports inside functions count: a lazy import hides a circle from Python, not from a reader."""
    graph = {m: our_imports(p) & set(STAGE_MODULES) for m, p in STAGE_MODULES.items()}

    def circle_from(start: str, path: tuple[str, ...], seen: set[str]) -> tuple[str, ...]:
        for nxt in sorted(graph[path[-1]]):
            if nxt == start:
                return (*path, start)
            if nxt not in seen:
                seen.add(nxt)
                if found := circle_from(start, (*path, nxt), seen):
                    return found
        return ()

    circles = [c for m in sorted(graph) if (c := circle_from(m, (m,), set()))]
    assert not circles, " -> ".join(circles[0])


def test_only_the_run_the_settings_and_the_services_open_the_catalogue() -> None:
    """An implementation imports the contract (``stages.registry``), never the catalogue that lists it."""
    users = {module_name(p) for p in MODULES if "stages.catalog" in our_imports(p)}
    assert users, "nothing opens the catalogue: the check would see nothing"
    assert {part(m) for m in users} <= {"run", "settings", "speech", "entry"}, sorted(users)


@pytest.mark.parametrize("path", [p for p in MODULES if not module_name(p).startswith("stages.")], ids=module_name)
def test_outside_stages_a_role_is_reached_through_its_package_never_one_of_its_modules(path: Path) -> None:
    """``stages.llm``, ``stages.vad``... (and the registry, the catalogue) are what the rest may name; a module
    inside a role (``stages.llm.llama``, ``stages.asr.typed``) is an implementation's or the role's own business,
    so the run reaches implementations through the registry alone."""
    inside = sorted(m for m in our_imports(path) if m.startswith("stages.") and m.count(".") > 1)
    assert not inside, f"{module_name(path)} imports {inside}: import from the role's package instead"


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_no_entry_point_imports_another(entry: str) -> None:
    """An entry point is a command, not a library: what two of them share lives in ``pipeline.cli``."""
    path = ROOT / Path(*entry.split(".")).with_suffix(".py")
    assert not our_imports(path) & (ENTRY_POINTS - {entry}), entry


def test_only_entry_points_import_the_command_line_helpers() -> None:
    users = {module_name(p) for p in MODULES if "pipeline.cli" in our_imports(p)}
    assert users and {part(m) for m in users} == {"entry"}, sorted(users)
    assert not {name for name, may in MAY_USE.items() if "entry" in may}, "a part may not use an entry point"
    assert not [entry for entry, may in ENTRY_MAY_USE.items() if "entry" in may], "an entry point uses another"


def test_the_run_loop_never_imports_analysis_or_the_report() -> None:
    for path in (ROOT / "pipeline" / "run").rglob("*.py"):
        assert not {m for m in our_imports(path) if part(m) in ("analysis", "report")}, path.name


@pytest.mark.parametrize("path", sorted((ROOT / "stages").rglob("*.py")), ids=lambda p: module_name(p))
def test_stages_never_read_the_clock_or_touch_tracing(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not imported & {"time", "datetime", "opentelemetry", "opentelemetry.trace"}
    source = path.read_text(encoding="utf-8")
    assert "loop.time" not in source and "perf_counter" not in source and "monotonic" not in source


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_only_entry_points_read_the_environment_and_command_line(path: Path) -> None:
    if part(module_name(path)) in ("entry", "cli"):
        return
    source = path.read_text(encoding="utf-8")
    for word in ("os.environ", "getenv", "sys.argv", "argparse"):
        assert word not in source, f"{module_name(path)} uses {word}"


def test_every_folder_is_a_known_part() -> None:
    folders = {p.parent for p in MODULES if p.parent.parent.name == "pipeline"}
    assert {f.name for f in folders} <= set(MAY_USE) | {"report"}, sorted(f.name for f in folders)


def test_every_entry_point_has_its_own_allowance() -> None:
    """No entry point is exempt: one without an allowance would import nothing of ours and fail above."""
    assert set(ENTRY_MAY_USE) == ENTRY_POINTS


def test_the_wall_check_sees_forbidden_imports(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from pipeline.run import turn\nimport stages.vad.endpointer\nfrom pipeline.clock import Clock\n"
        "from . import load\nfrom .sections import base\n"
    )
    found = our_imports(bad, package="pipeline.report")
    expected = {"pipeline.run.turn", "stages.vad.endpointer", "pipeline.clock", "pipeline.report.load"}
    assert found == expected | {"pipeline.report.sections.base"}
    assert {part(m) for m in found} - MAY_USE["report"] - {"report"} == {"run", "stages", "clock"}


# --- the house in numbers (scripts/house.py prints them) ------------------------------------------------


def test_no_product_module_is_over_400_lines() -> None:
    assert not long_modules(), long_modules()


def test_no_import_goes_back_up_the_layers() -> None:
    assert not imports_up(), imports_up()


def test_no_modules_of_ours_import_each_other_in_a_circle() -> None:
    assert not circles(), circles()


def test_the_circle_finder_finds_a_circle_however_long_and_nothing_else() -> None:
    graph = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": [], "e": ["e"]}
    assert sorted(sorted(g) for g in _strongly_connected(graph) if len(g) > 1) == [["a", "b", "c"]]


def test_the_product_never_imports_the_lab_tools() -> None:
    """``labtools`` is a part of its own that no allowance names, so an import of it is an import back up."""
    assert part("labtools.house") == part("labtools") == "labtools"
    assert all("labtools" not in allowed for allowed in (*MAY_USE.values(), *ENTRY_MAY_USE.values()))


# --- the tools' rules: scripts/ and labtools/ run against the installed project -------------------------------


def test_no_script_or_lab_tool_changes_sys_path() -> None:
    """They run as ``python scripts/X.py`` with the project installed: ``import pipeline`` needs no path set-up,
    and one would let a script import what the installed project does not hold."""
    assert not path_changes(), path_changes()


def test_no_script_or_lab_tool_imports_the_tests() -> None:
    assert not imports_of_tests(), imports_of_tests()


def test_scripts_and_lab_tools_import_only_the_product_and_labtools_of_ours() -> None:
    assert not sibling_imports(), sibling_imports()


def test_the_path_check_sees_every_way_of_changing_sys_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import site\nimport sys\nimport sys as system\nfrom sys import path as found\n"
        "sys.path.insert(0, 'a')\nsystem.path.append('b')\nsys.path = ['c']\nsys.path[:0] = ['d']\n"
        "sys.path += ['e']\nfound.extend(['f'])\ndel sys.path[0]\nsite.addsitedir('g')\n"
        "def later() -> None:\n    first, sys.path = 1, []\n"
        # read, not changed; and a list that is only called path
        "print(sys.path)\nfirst = sys.path[0]\npath: list[int] = []\npath.append(1)\nsys.modules.pop('x')\n"
    )
    assert path_changes_in(bad) == [
        "line 5: sys.path.insert(0, 'a')",
        "line 6: system.path.append('b')",
        "line 7: sys.path = ['c']",
        "line 8: sys.path[:0] = ['d']",
        "line 9: sys.path += ['e']",
        "line 10: found.extend(['f'])",
        "line 11: del sys.path[0]",
        "line 12: site.addsitedir('g')",
        "line 14: first, sys.path = (1, [])",
    ]


def test_the_tests_check_sees_a_tool_importing_a_test_module(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import tests.harness\nfrom tests.cloud_helpers import cloud_turn\nfrom tests import harness\n"
        "import testsuite\nfrom pipeline import replay\nfrom . import tests\n"
        "def later() -> None:\n    from tests.acoustic.test_sound_e2e import find\n"
    )
    assert imports_of_tests_in(bad, package="scripts") == [
        "line 1: tests.harness",
        "line 2: tests.cloud_helpers",
        "line 3: tests",
        "line 8: tests.acoustic.test_sound_e2e",
    ]


def test_the_sibling_check_sees_a_script_or_a_tool_importing_beside_itself(tmp_path: Path) -> None:
    for folder in ("pipeline", "stages", "labtools", "tests", "scripts/report_bench", "labtools/parts"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "scripts" / "git_worktree.py").write_text("")
    (tmp_path / "labtools" / "machine.py").write_text("")
    script = tmp_path / "scripts" / "bench.py"
    script.write_text(
        "import git_worktree\nfrom report_bench.machine import timed\nimport scripts.other\n"
        "from pipeline import replay\nimport stages.vad\nfrom labtools.machine import timed as t\n"
        "import numpy\nfrom tests import harness\n"  # not ours; and tests, which the tests check counts
        "def later() -> None:\n    import git_worktree\n"
    )
    assert sibling_imports_in(script, "scripts", root=tmp_path) == [
        "line 1: git_worktree",
        "line 2: report_bench.machine",
        "line 3: scripts.other",
        "line 10: git_worktree",
    ]
    tool = tmp_path / "labtools" / "parts" / "steps.py"
    tool.write_text(
        "import machine\nfrom scripts import bench\nfrom . import helpers\nfrom ..machine import timed\n"
        "from labtools.parts import helpers as h\nimport pipeline.replay\n"
    )
    assert sibling_imports_in(tool, "labtools.parts", root=tmp_path) == ["line 1: machine", "line 2: scripts"]


# the low-level trace readers: what turns a file into spans. Everything else reads through analysis/read.py
# (read_traces, read_spans), so every figure comes from one reading of the traces (the report's Jaeger reader
# turns Jaeger's export, the other source, into spans)
LOW_LEVEL_READERS = {"read_trace_file", "read_lines", "read_line_at", "spans_from_traces_data"}


@pytest.mark.parametrize("path", [p for p in MODULES if p.parts[-3] != "tests"], ids=lambda p: module_name(p))
def test_only_the_reader_turns_trace_files_into_spans(path: Path) -> None:
    name = module_name(path)
    if part(name) == "analysis" or name == "pipeline.report.jaeger":
        return
    tree = ast.parse(path.read_text(encoding="utf-8"))
    used = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names} & LOW_LEVEL_READERS
    assert not used, f"{name} reads traces itself with {sorted(used)}: read them through pipeline.analysis.read"
