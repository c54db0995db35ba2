"""scripts/fault_matrix.py's command line: it names its cases, and refuses an unknown one before starting anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pipeline.interop.fault_kinds import CASES
from tests.paths import REPO_ROOT

SCRIPT = [sys.executable, "scripts/fault_matrix.py"]


def test_it_lists_every_case() -> None:
    done = subprocess.run([*SCRIPT, "--list"], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == list(CASES)


def test_an_unknown_case_is_refused_by_name(tmp_path: Path) -> None:
    done = subprocess.run(
        [*SCRIPT, "--cases", "kill,nope", "--out", str(tmp_path)], capture_output=True, text=True, cwd=REPO_ROOT
    )
    assert done.returncode == 2
    assert done.stderr.startswith("fault_matrix: unknown fault case(s) nope; known: kill, kill-restart,")
