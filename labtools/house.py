"""The house rules, read from the source alone: the design's walls on every import, and the house's counts.

- The walls' tables (``ENTRY_POINTS``, ``MAY_USE``, ``ENTRY_MAY_USE``) and a module's part live in
  ``labtools.walls``; they are named here too, so that one import gives every rule.
- Reading: a module's dotted name (``module_name``), the modules of ours it imports (``our_imports``), every
  module it imports by its top-level name (``top_imports``).
- The counts ``scripts/house.py`` prints and ``tests/labtools/test_walls.py`` holds at zero: product modules over
  ``MOST_LINES`` lines, imports back up the layers, import circles; and the tools' own rules (``scripts/``
  and ``labtools/``): no change to ``sys.path``, no import of ``tests``, nothing of ours imported but
  ``pipeline``, ``stages`` and ``labtools``.

Imports inside functions count everywhere: a lazy import hides a dependency from Python, not from a reader.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

from labtools.walls import ENTRY_MAY_USE, ENTRY_POINTS, MAY_USE, allowed_parts, part

__all__ = [
    "ENTRY_MAY_USE",
    "ENTRY_POINTS",
    "MAY_USE",
    "MODULES",
    "MOST_LINES",
    "PRODUCT",
    "ROOT",
    "TOOLS",
    "TOOLS_MAY_USE",
    "_strongly_connected",
    "allowed_parts",
    "circles",
    "imports_of_tests",
    "imports_of_tests_in",
    "imports_up",
    "long_modules",
    "module_name",
    "our_imports",
    "part",
    "path_changes",
    "path_changes_in",
    "sibling_imports",
    "sibling_imports_in",
    "tool_modules",
    "top_imports",
]

ROOT = Path(__file__).resolve().parent.parent
MOST_LINES = 400
PRODUCT = ("pipeline", "stages", "scripts", "labtools")
OURS = ("pipeline", "stages", "labtools")  # the packages whose modules the walls and the circles see
# the lab's tools: they run as ``python scripts/X.py`` against the installed project, and share their code
# through ``labtools`` alone; what they may import of ours is the product and that package
TOOLS = ("scripts", "labtools")
TOOLS_MAY_USE = frozenset({"pipeline", "stages", "labtools"})


def module_name(path: Path, root: Path = ROOT) -> str:
    """``pipeline/run/turn.py`` as ``pipeline.run.turn``, a package's ``__init__.py`` as the package."""
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def _package_of(path: Path, root: Path = ROOT) -> str:
    """The package a relative import in ``path`` starts from: its folder's, or itself for an ``__init__.py``."""
    name = module_name(path, root)
    return name if path.name == "__init__.py" else name.rsplit(".", 1)[0]


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` names, a relative one resolved against ``package``."""
    module = node.module or ""
    if not node.level:
        return module
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([module] if module else []))


def our_imports(path: Path, package: str = "") -> set[str]:
    """Modules of ours that ``path`` imports; relative imports resolved, ``from pkg import mod`` as ``pkg.mod``."""
    package = package or _package_of(path)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, package)
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                found.add(
                    candidate if (ROOT / Path(*candidate.split("."))).exists() or _is_module(candidate) else module
                )
    return {n for n in found if n.split(".")[0] in OURS}


def _is_module(name: str) -> bool:
    return (ROOT / Path(*name.split("."))).with_suffix(".py").is_file()


def top_imports(path: Path, package: str) -> list[tuple[int, str]]:
    """Every module ``path`` imports, as (line, absolute dotted name), relative ones resolved against ``package``:
    ``import a.b`` is ``a.b``, ``from a import b`` is ``a`` (its first name is what says whose it is)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and (module := _absolute(node, package)):
            found.append((node.lineno, module))
    return sorted(found)


MODULES = sorted(p for root in ("pipeline", "stages") for p in (ROOT / root).rglob("*.py"))


def tool_modules(root: Path = ROOT) -> list[Path]:
    """Every module of the lab's tools: under ``scripts/`` and ``labtools/``."""
    return sorted(p for folder in TOOLS for p in (root / folder).rglob("*.py"))


# --- the house in numbers (scripts/house.py prints them) ------------------------------------------------


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
        if part(name) not in MAY_USE and part(name) != "entry":  # a new folder: said, rather than a KeyError
            found.append(f"{name} ({part(name)}): a part with no allowance in labtools/walls.py's MAY_USE")
            continue
        allowed = allowed_parts(name)
        found += [f"{name} -> {m} ({part(m)})" for m in sorted(our_imports(path)) if part(m) not in allowed]
    return found


def circles() -> list[list[str]]:
    """The import circles among our modules (the product's and ``labtools``'): each strongly connected set of
    more than one module. A script is no module anyone imports, so it closes no circle."""
    names = {module_name(p): p for root in OURS for p in (ROOT / root).rglob("*.py")}
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


# --- the tools' rules: scripts/ and labtools/ run against the installed project -------------------------

# the list's own methods that change it: any of them on sys.path makes an import find another module than
# the installed project's, or a sibling only this checkout's layout provides
_CHANGING = frozenset({"insert", "append", "extend", "remove", "pop", "clear", "sort", "reverse"})


def path_changes_in(path: Path) -> list[str]:
    """Each place ``path`` changes ``sys.path`` (a method that changes the list, an assignment to it or to
    part of it, ``+=``, ``del``, ``site.addsitedir``), as ``line N: the statement``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    modules = {
        alias.asname or alias.name: alias.name for n in imports if isinstance(n, ast.Import) for alias in n.names
    }
    # ``from sys import path`` binds the list itself to a name
    bare = {
        alias.asname or alias.name
        for n in imports
        if isinstance(n, ast.ImportFrom) and n.module == "sys" and not n.level
        for alias in n.names
        if alias.name == "path"
    }

    def is_sys_path(node: ast.expr) -> bool:
        if isinstance(node, ast.Subscript):  # sys.path[0] = ..., sys.path[:] = ..., del sys.path[0]
            return is_sys_path(node.value)
        if isinstance(node, ast.Name):
            return node.id in bare
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "path"
            and isinstance(node.value, ast.Name)
            and modules.get(node.value.id) == "sys"
        )

    def targets(node: ast.AST) -> list[ast.expr]:
        if isinstance(node, ast.Assign | ast.Delete):
            listed = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            listed = [node.target]
        else:
            return []
        flat: list[ast.expr] = []
        while listed:  # ``a, sys.path = ...`` assigns it too
            first, *listed = listed
            if isinstance(first, ast.Tuple | ast.List):
                listed = [*first.elts, *listed]
            else:
                flat.append(first.value if isinstance(first, ast.Starred) else first)
        return flat

    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, owner = node.func.attr, node.func.value
            changes = method in _CHANGING and is_sys_path(owner)
            changes |= method == "addsitedir" and isinstance(owner, ast.Name) and modules.get(owner.id) == "site"
        else:
            changes = any(is_sys_path(t) for t in targets(node))
        if changes and isinstance(node, ast.stmt | ast.expr):
            found.append((node.lineno, ast.unparse(node)))
    return [f"line {line}: {text}" for line, text in sorted(found)]


def imports_of_tests_in(path: Path, package: str) -> list[str]:
    """What of ``tests`` ``path`` imports (relative imports resolved against ``package``): a tool must not
    depend on a test module, which nothing installs and which may change for its test's sake alone."""
    return [f"line {line}: {name}" for line, name in top_imports(path, package) if name.split(".")[0] == "tests"]


def _ours_beside(path: Path, root: Path) -> set[str]:
    """The top-level names an import in ``path`` could mean of ours: each module and package at the root and
    in every folder from there down to ``path``'s own (a script's folder is on ``sys.path`` when it runs, so
    a bare name may be a sibling script)."""
    names: set[str] = set()
    folder, folders = path.parent, []
    while folder != root and root in folder.parents:
        folders.append(folder)
        folder = folder.parent
    for here in (root, *folders):
        for entry in here.iterdir():
            if entry.suffix == ".py":
                names.add(entry.stem)
            elif entry.is_dir() and entry.name.isidentifier() and any(entry.glob("*.py")):
                names.add(entry.name)
    return names - {"__init__", "__main__"}


def sibling_imports_in(path: Path, package: str, root: Path = ROOT) -> list[str]:
    """What of ours ``path`` imports besides ``pipeline``, ``stages`` and ``labtools`` (and ``tests``, which
    ``imports_of_tests_in`` counts): a sibling script or package, which only this checkout's layout provides,
    or ``scripts`` itself. Shared code lives in ``labtools``."""
    ours = _ours_beside(path, root) - TOOLS_MAY_USE - {"tests"}
    return [f"line {line}: {name}" for line, name in top_imports(path, package) if name.split(".")[0] in ours]


def _offences(check: Callable[[Path, str], list[str]]) -> list[str]:
    """Each offence ``check`` finds among the tools' modules, as ``path, line N: what``."""
    return [f"{p.relative_to(ROOT)}, {found}" for p in tool_modules() for found in check(p, _package_of(p))]


def path_changes() -> list[str]:
    """Each change to ``sys.path`` in a module under ``scripts/`` or ``labtools/``."""
    return _offences(lambda path, _package: path_changes_in(path))


def imports_of_tests() -> list[str]:
    """Each import of ``tests`` (or anything under it) by a module under ``scripts/`` or ``labtools/``."""
    return _offences(imports_of_tests_in)


def sibling_imports() -> list[str]:
    """Each import by a module under ``scripts/`` or ``labtools/`` of something of ours other than
    ``pipeline``, ``stages`` and ``labtools`` (a sibling script or package of scripts/, ``scripts`` itself)."""
    return _offences(sibling_imports_in)
