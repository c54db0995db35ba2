"""The design's walls (docs/design.md), checked by part on the imports of every module.

A module's part is the folder it lives in (``pipeline/run/`` is the run, ``stages/`` the
stages...), so a new module is checked the moment it exists; nothing here lists files.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENTRY_POINTS = {
    "pipeline.replay",
    "pipeline.analyze",
    "pipeline.whatif",
    "pipeline.experiment",
    "pipeline.endpoints.cloud.__main__",
    "pipeline.report.__main__",
    "pipeline.offline.__main__",
    "pipeline.serve",
    "pipeline.sweep.__main__",
    "pipeline.endpoints.speech.__main__",
    "pipeline.capacity.sink",
    "pipeline.capacity.__main__",
    "pipeline.acoustic.__main__",
    "pipeline.acoustic.run",  # `python -m pipeline.acoustic run`: its arguments, the sound devices, the measurement
    "pipeline.cli",  # the entry points' shared helpers (OTLP from the environment, run ids, the replay's arguments)
}
# part -> the parts it may import (its own part always allowed)
MAY_USE = {
    "contract": set(),
    "clock": set(),
    "settings": {"contract", "registry", "catalog"},  # the valid impl names and their settings come from the catalogue
    "stages": {"contract", "registry"},
    "registry": {"contract"},  # the contract implementations are registered under; imports none of them
    "catalog": {"contract", "registry", "stages"},  # the one part that imports the implementations
    "run": {"contract", "clock", "settings", "stages", "registry", "catalog", "tracing", "names", "endpoints", "fleet"},
    "fleet": {"contract", "clock", "stages", "tracing"},  # arrivals, the shared model's scheduler, background work
    "tracing": {"contract", "names"},
    "analysis": {"names"},
    "names": set(),
    "report": {"analysis", "names", "capacity"},  # capacity: the ramp's result schema (capacity.result) only
    "endpoints": {"contract"},
    # the speech services run the configured stages, through the registry only, and trace each request;
    # they are served as the other endpoints are (``pipeline.endpoints.serving``)
    "speech": {"contract", "clock", "settings", "registry", "catalog", "tracing", "names", "endpoints"},
    "offline": {"settings"},
    # the xiaozhi wire in three rooms: device -> wire <- server. The wire knows neither end; the ends never know
    # each other; each end runs the run's turn (the single timing wrapper, its link) over the wire
    "transport": set(),  # the map alone
    "transport.wire": {"contract"},
    "transport.server": {"contract", "clock", "run", "tracing", "transport.wire"},
    # acoustic: its speaker and its user's voice into sound devices (transport/device/speaker.py)
    "transport.device": {"contract", "clock", "run", "tracing", "endpoints", "transport.wire", "acoustic"},
    "sweep": {"settings", "analysis"},  # plans points from the settings, reads each point's rows back
    # runs servers the lab did not write and the lab's own entry points as processes, reads their traces back
    "interop": {"settings", "endpoints", "analysis", "names"},
    # ramps devices against a server step by step: each step a replay run (its preparation, its devices), read back
    "capacity": {
        *("contract", "clock", "settings", "run", "fleet", "tracing", "analysis", "names"),
        *("transport.device", "transport.wire", "transport.server", "entry"),
        "endpoints",  # a server process tree's CPU, read from /proc as the turn's load probe reads it (load)
    },
    # measures a recording from its sound alone: the questions' audio (settings), their end of speech by the
    # run's own VAD (run), the contract's frame format; never a server, a trace or the report; plays and records
    # through the sound card (sound.py, run.py)
    "acoustic": {"contract", "settings", "run"},
}


# entry point -> the parts it may import: a command wires parts together, but only the parts its job
# needs (reading traces needs analysis, never the report; the report's command, never the run)
ENTRY_MAY_USE = {
    "pipeline.capacity.sink": {"transport.wire"},  # a server that answers hello and discards the rest
    "pipeline.acoustic.run": {"acoustic", "settings"},
    "pipeline.analyze": {"analysis"},
    "pipeline.whatif": {"analysis"},  # re-timing and its intervals are statistics: analysis alone
    "pipeline.report.__main__": {"report", "analysis"},
    "pipeline.offline.__main__": {"offline"},
    "pipeline.experiment": {"analysis", "run"},  # run: the interleaving conductor (run.interleave)
    "pipeline.endpoints.cloud.__main__": {"endpoints"},
    "pipeline.cli": {"settings", "tracing", "analysis", "transport.device", "transport.wire"},  # the choices only
    "pipeline.sweep.__main__": {"sweep", "settings", "analysis", "entry"},
    "pipeline.capacity.__main__": {"capacity"},
    "pipeline.acoustic.__main__": {"acoustic", "settings"},
    "pipeline.endpoints.speech.__main__": {
        "speech",
        "settings",
        "tracing",
        "names",
        "clock",
        "endpoints",
        "entry",
    },
    "pipeline.replay": {
        *("contract", "clock", "settings", "registry", "run", "tracing", "analysis", "endpoints", "fleet"),
        *("offline", "transport.device", "entry"),
    },
    "pipeline.serve": {
        "contract",
        "clock",
        "settings",
        "stages",
        "run",
        "tracing",
        "analysis",
        "endpoints",
        "transport.server",
        "transport.wire",
        "names",
        "entry",
    },
}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def part(module: str) -> str:
    """The part a module of ours belongs to."""
    if module in ENTRY_POINTS or module in ("pipeline", "stages"):
        return "entry"
    if module == "pipeline.events":
        return "contract"
    if module == "pipeline.clock":
        return "clock"
    if module == "pipeline.tracing.names":
        return "names"
    if module == "stages.registry":
        return "registry"
    if module == "stages.catalog":
        return "catalog"
    if module.startswith("stages."):
        return "stages"
    if module.startswith("pipeline.endpoints.speech"):
        return "speech"
    if module.startswith("pipeline.transport.") and module.count(".") >= 3:
        return ".".join(module.split(".")[1:3])  # transport.wire, transport.server, transport.device
    return module.split(".")[1]


def our_imports(path: Path, package: str = "") -> set[str]:
    """Modules of ours that ``path`` imports; relative imports resolved, ``from pkg import mod`` as ``pkg.mod``."""
    if not package:
        package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else module_name(path)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([module] if module else []))
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                found.add(
                    candidate if (ROOT / Path(*candidate.split("."))).exists() or _is_module(candidate) else module
                )
    return {n for n in found if n.split(".")[0] in ("pipeline", "stages")}


def _is_module(name: str) -> bool:
    return (ROOT / Path(*name.split("."))).with_suffix(".py").is_file()


MODULES = sorted(p for root in ("pipeline", "stages") for p in (ROOT / root).rglob("*.py"))


def allowed_parts(module: str) -> set[str]:
    """The parts ``module`` may import: its entry point's allowance, or its part's and its own."""
    mine = part(module)
    return ENTRY_MAY_USE.get(module, set()) if mine == "entry" else MAY_USE[mine] | {mine}


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


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS - {"pipeline.cli"}))
def test_no_entry_point_imports_another(entry: str) -> None:
    """An entry point is a command, not a library: what two of them share lives in ``pipeline.cli``."""
    path = ROOT / Path(*entry.split(".")).with_suffix(".py")
    assert not our_imports(path) & (ENTRY_POINTS - {"pipeline.cli", entry}), entry


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
    if part(module_name(path)) == "entry":
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

MOST_LINES = 400
PRODUCT = ("pipeline", "stages", "scripts")


def long_modules() -> dict[str, int]:
    """Product modules over ``MOST_LINES`` lines, with their lengths."""
    files = sorted(p for root in PRODUCT for p in (ROOT / root).rglob("*.py"))
    return {
        str(p.relative_to(ROOT)): n
        for p in files
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MOST_LINES
    }


def imports_up() -> list[str]:
    """Each import a module makes of a part its own may not use, as ``module -> imported (part)``."""
    found = []
    for path in MODULES:
        name = module_name(path)
        allowed = allowed_parts(name)
        found += [f"{name} -> {m} ({part(m)})" for m in sorted(our_imports(path)) if part(m) not in allowed]
    return found


def circles() -> list[list[str]]:
    """The import circles among our modules: each strongly connected set of more than one module."""
    names = {module_name(p): p for p in MODULES}
    graph = {name: sorted(m for m in our_imports(path) if m in names and m != name) for name, path in names.items()}
    return [sorted(group) for group in _strongly_connected(graph) if len(group) > 1]


def _strongly_connected(graph: dict[str, list[str]]) -> Iterator[list[str]]:
    """Tarjan's algorithm, iterative (the import graph is deeper than Python's recursion likes)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            if child < len(graph[node]):
                work.append((node, child + 1))
                nxt = graph[node][child]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                yield group


def test_no_product_module_is_over_400_lines() -> None:
    assert not long_modules(), long_modules()


def test_no_import_goes_back_up_the_layers() -> None:
    assert not imports_up(), imports_up()


def test_no_modules_of_ours_import_each_other_in_a_circle() -> None:
    assert not circles(), circles()


def test_the_circle_finder_finds_a_circle_however_long_and_nothing_else() -> None:
    graph = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": [], "e": ["e"]}
    assert sorted(sorted(g) for g in _strongly_connected(graph) if len(g) > 1) == [["a", "b", "c"]]


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
