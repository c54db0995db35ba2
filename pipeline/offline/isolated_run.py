"""Condition B': the replay inside a network namespace with only loopback, under strace, and its verdict.

The run happens under ``unshare -n`` (loopback brought up, so a local model
server still works) and ``strace -f -k`` (every connect of every process, with
its stack), with the replay's Python audit log on. Afterwards every attempt to
reach beyond loopback or to look up a host name is attributed to a component
and the verdict is written to ``<out>/offline/verdict.json``: fully local yes or
no, and which component reached out.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

from pipeline.offline.verdict import Verdict, verdict

TOOLS = {"unshare": "util-linux", "strace": "strace", "ip": "iproute2"}
TRACED = "connect,sendto,sendmsg,sendmmsg,clone,clone3"


def boot(audit_log: Path) -> str:
    """The replay process's first code: the audit hook goes in before ``site`` runs (python -S, then
    site.main()), so whatever .pth files and sitecustomize do at start-up is seen and named too."""
    return (
        f"from pipeline.offline import guard; guard.install({str(audit_log)!r}); "
        "import site; site.main(); guard.watch_http_clients(); "
        "import runpy; runpy.run_module('pipeline.replay', run_name='__main__')"
    )


def missing_tools() -> list[str]:
    """What this machine lacks to run B', as 'tool (Debian package)'."""
    return [f"{tool} (Debian: {package})" for tool, package in TOOLS.items() if shutil.which(tool) is None]


def command(fixtures: str, out: Path, extra: Sequence[str], stacks: bool = False) -> list[str]:
    """The replay in a namespace with only loopback, under strace and the audit hook.

    strace stops on connects and datagram sends (a native sendto to a name server needs no
    connect) and on thread and process creation (to fold threads into processes); with
    ``--seccomp-bpf`` on nothing else. Stacks (``-k``) name the library that reached out, but
    cost about 45 ms at every process start (espeak-ng starts once per sentence), so they are
    asked for only when wanted: without them a native attempt is still found, by its process.
    """
    logs = out / "offline"
    replay = [sys.executable, "-S", "-c", boot(logs / "audit.jsonl"), fixtures]
    replay += ["--condition", "B'", "--out", str(out), *extra]
    traced = ["strace", "-f", "-qq", "-Y", "-ttt", *(["-k"] if stacks else []), "--seccomp-bpf"]
    traced += ["-e", f"trace={TRACED}"]
    traced += ["-o", str(logs / "strace.log")]
    inner = "ip link set lo up && exec " + shlex.join([*traced, "--", *replay])
    return ["unshare", "--net", "--", "sh", "-c", inner]


def run_offline(
    fixtures: str, out: Path, extra: Sequence[str], cwd: Path, env: Mapping[str, str], stacks: bool = False
) -> tuple[int, Verdict]:
    """Run the replay offline; returns its exit status and the verdict, written to ``out/offline/verdict.json``."""
    logs = out / "offline"
    logs.mkdir(parents=True, exist_ok=True)
    for old in ("audit.jsonl", "strace.log"):
        (logs / old).unlink(missing_ok=True)
    code = subprocess.run(command(fixtures, out, extra, stacks), cwd=cwd, env=dict(env)).returncode
    result = verdict(logs / "strace.log", logs / "audit.jsonl", code)
    report = {
        "fully_local": result.fully_local,
        "verdict": result.word,
        "unknown_because": result.unknown_because,
        "components": sorted(result.by_component()),
        "attempts": [asdict(a) for a in result.attempts],
        "problems": result.problems,
        "replay_exit_code": code,
    }
    (logs / "verdict.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return code, result
