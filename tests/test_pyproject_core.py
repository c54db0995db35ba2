"""The core install: reading trace files and building the report need no model or runtime package.

pyproject's core ``dependencies`` are what ``python -m pipeline.report`` and ``python -m pipeline.analyze``
need; every model, runtime, transport and tracing package is an extra (README, "Install: the parts").
Both entry points run here on the committed trace fixtures in a fresh interpreter, which reports what it
imported: nothing from an extra, nothing outside the core requirements and what they require. The
``install`` test goes the whole way: ``pip install .`` (core only) into a new virtual environment, then
both commands, whose report and rows must equal this environment's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
TRACES = ROOT / "tests" / "data" / "report"  # every committed run: the experiment, drift, failed folders

# Modules from the extras (and what they pull in) that reading traces must never import.
NOT_CORE = (
    "faster_whisper",
    "ctranslate2",
    "av",
    "tokenizers",
    "llama_cpp",
    "onnxruntime",
    "piper",
    "funasr",
    "torch",
    "ray",
    "opentelemetry",
    "google.protobuf",
    "grpc",
    "aiohttp",
    "yarl",
    "websockets",
    "aiomqtt",
    "opuslib_next",
    "cryptography",
    "soundfile",
    "soxr",
    "pypinyin",
)
# what core packages try to import and do without: zhconv ``pkg_resources`` (the environment's setuptools),
# msgspec ``typing_extensions``
OPTIONAL = {"pip", "setuptools", "typing-extensions"}

# Runs ``python -m MODULE ARGS`` as the command line would, then writes the modules it imported to OUT.
# The report ends with ``os._exit`` (no interpreter teardown), so that is where it is caught.
_PROBE = """
import json, os, runpy, sys
out, module, *args = sys.argv[1:]
def record(status):
    with open(out, "w") as fh:
        json.dump({"status": status, "modules": sorted(sys.modules)}, fh)
real_exit = os._exit
def exit_now(status):
    record(status)
    real_exit(status)
os._exit = exit_now
sys.argv = [module, *args]
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit as exc:
    record(exc.code)
    raise
record(0)
"""

COMMANDS = {
    "report": ("pipeline.report", [str(TRACES), "--out", "{out}/report"]),
    "analyze": ("pipeline.analyze", [str(TRACES), "--csv", "{out}/analyze.csv"]),
}


def run_probed(python: Path | str, name: str, out: Path, cwd: Path) -> tuple[int, list[str], str]:
    """One entry point run by ``python`` in ``cwd``: its exit status, the modules it imported, its stdout."""
    module, args = COMMANDS[name]
    record = out / f"{name}-modules.json"
    argv = [a.format(out=out) for a in args]
    proc = subprocess.run(
        [str(python), "-c", _PROBE, str(record), module, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert record.exists(), proc.stderr
    probe = json.loads(record.read_text())
    return probe["status"], probe["modules"], proc.stdout


def written(out: Path) -> dict[str, bytes]:
    """Every file a command wrote under ``out`` (the probe's own records left out), by relative path."""
    files = (f for f in out.rglob("*") if f.is_file() and not f.name.endswith("-modules.json"))
    return {str(f.relative_to(out)): f.read_bytes() for f in files}


def core_distributions() -> set[str]:
    """pyproject's core requirements and, as installed here, everything they require (extras left out)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [Requirement(r).name for r in project["dependencies"]]
    seen: set[str] = set()
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            needs = requires(name) or []
        except PackageNotFoundError:
            continue
        for text in needs:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def outside_core(modules: list[str]) -> list[str]:
    """The imported top-level modules that no core distribution provides (nor one a core package may try)."""
    providers = packages_distributions()
    allowed = core_distributions() | OPTIONAL
    tops = {m.split(".")[0] for m in modules} - {"pipeline", "stages"}
    return sorted(
        f"{top} ({', '.join(providers[top])})"
        for top in tops
        if top in providers and not {canonicalize_name(d) for d in providers[top]} & allowed
    )


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_reading_traces_imports_only_the_core(name: str, tmp_path: Path) -> None:
    status, modules, _ = run_probed(sys.executable, name, tmp_path, ROOT)
    assert status in (0, 3), f"{name} failed"  # 3: the report was written, the comparison refused (M11)
    imported = set(modules)
    assert [m for m in NOT_CORE if m in imported] == []
    assert outside_core(modules) == []


def test_the_check_sees_an_extra_imported(tmp_path: Path) -> None:
    """The probe would catch it: a module of an extra imported on the way shows up as outside the core."""
    assert outside_core(["pipeline.report", "numpy", "soundfile", "soxr"]) == [
        "soundfile (soundfile)",
        "soxr (soxr)",
    ]


@pytest.mark.install
def test_pip_install_core_reads_traces_as_the_full_install(tmp_path: Path) -> None:
    """``pip install .`` with no extra, in a new virtual environment: the same report and rows as here."""
    source = tmp_path / "source"  # a copy, so the build leaves nothing in the working tree
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    for package in ("pipeline", "stages"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(source)], check=True, timeout=600)

    for name in sorted(COMMANDS):
        core_out, full_out = tmp_path / "core" / name, tmp_path / "full" / name
        core_out.mkdir(parents=True)
        full_out.mkdir(parents=True)
        # run outside the working tree, so the core environment imports its installed copy
        core = run_probed(python, name, core_out, tmp_path)
        full = run_probed(sys.executable, name, full_out, ROOT)
        assert core[0] == full[0] in (0, 3)
        assert [m for m in NOT_CORE if m in set(core[1])] == []
        if name == "analyze":
            assert core[2] == full[2]  # the summary table
        files = written(full_out)  # the report, its plots and rows; analyze's rows
        assert files
        assert written(core_out) == files
