"""A fault case in a network and mount namespace of its own: ``unshare --net --mount --fork``, loopback up.

A network cut (an nftables rule) and a small disk (a tmpfs mount) must touch nothing of the machine's: inside
the namespace the case has its own loopback, its own (empty) ruleset and its own mounts, and both vanish
with it, however the case ends. The case runs there as ``python -m pipeline.interop.fault_inside OUT CASE``
(the case as JSON; the lab's B' runs the same way, ``offline.isolated_run``) and writes its result to
``OUT/NAME/case.json``, read back here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from pipeline.interop.fault_kinds import FaultCase
from pipeline.interop.fault_result import CaseResult

TOOLS = {"unshare": "util-linux", "nft": "nftables", "ip": "iproute2", "mount": "mount"}
SPARE_S = 120.0  # beyond the case's own bound: its servers' start and stop


def missing() -> str:
    """Why this machine cannot run a case in a namespace ("" when it can)."""
    if os.geteuid() != 0:
        return "needs root (a network namespace, nftables and a tmpfs mount)"
    absent = [f"{tool} (Debian: {package})" for tool, package in TOOLS.items() if shutil.which(tool) is None]
    return f"needs {', '.join(absent)}" if absent else ""


def command(case: FaultCase, out: Path) -> list[str]:
    written = json.dumps(dataclasses.asdict(case))
    inner = shlex.join([sys.executable, "-m", "pipeline.interop.fault_inside", str(out), written])
    return [
        "unshare",
        "--net",
        "--mount",
        "--fork",
        "--kill-child",
        "--",
        "sh",
        "-c",
        f"ip link set lo up && exec {inner}",
    ]


def run_in_namespace(case: FaultCase, out: Path, environment: Mapping[str, str], root: Path) -> CaseResult:
    """Run ``case`` in a namespace of its own (``root``: the repository, its working folder); its result, or one
    saying why there is none."""
    why = missing()
    if why:
        return CaseResult(case.name, case.title, status=f"not run: {why}")
    out = out.resolve()
    result_file = out / case.name / "case.json"
    result_file.unlink(missing_ok=True)
    log = out / f"{case.name}.namespace.log"
    out.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        try:
            subprocess.run(
                command(case, out), cwd=root, env=dict(environment), stdout=sink, stderr=subprocess.STDOUT,
                timeout=case.limit_s + SPARE_S,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return CaseResult(case.name, case.title, status=f"failed: no result within {case.limit_s + SPARE_S:g} s")
    if not result_file.is_file():
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] or ["no output"]
        return CaseResult(case.name, case.title, status=f"failed: the namespace run wrote no result ({tail[0]})")
    return CaseResult.from_dict(json.loads(result_file.read_text(encoding="utf-8")))
