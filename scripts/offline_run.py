"""Condition B': the replay inside a network namespace with only loopback, and the verdict.

The run happens under ``unshare -n`` (loopback brought up, so a local model
server still works) and ``strace -f -k`` (every connect of every process, with
its stack), with the replay's Python audit log on. Afterwards every attempt to
reach beyond loopback or to look up a host name is attributed to a component
and the verdict is printed and written to ``<out>/offline/verdict.json``:
fully local yes or no, and which component reached out.

Run (as root, or with unprivileged user namespaces enabled):
``python scripts/offline_run.py audio_fixtures/ --out runs/offline [replay options]``.
Exit status: the replay's, or 3 when it ran but something reached out.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.offline import verdict  # noqa: E402

# The audit hook goes in before ``site`` runs (python -S, then site.main()), so whatever
# .pth files and sitecustomize do at start-up is seen and named too.
BOOT = (
    "import sys; from pipeline import netguard; netguard.install(sys.argv.pop(1)); "
    "import site; site.main(); netguard.watch_http_clients(); "
    "import runpy; runpy.run_module('pipeline.replay', run_name='__main__')"
)


def command(fixtures: str, out: Path, extra: list[str]) -> list[str]:
    logs = out / "offline"
    replay = [sys.executable, "-S", "-c", BOOT, str(logs / "audit.jsonl"), fixtures]
    replay += ["--condition", "B'", "--out", str(out), *extra]
    traced = ["strace", "-f", "-qq", "-Y", "-ttt", "-k", "--seccomp-bpf", "-e", "trace=connect,clone,clone3"]
    traced += ["-o", str(logs / "strace.log")]
    inner = "ip link set lo up && exec " + shlex.join([*traced, "--", *replay])
    return ["unshare", "--net", "--", "sh", "-c", inner]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixtures")
    parser.add_argument("--out", type=Path, required=True)
    args, extra = parser.parse_known_args()
    for tool in ("unshare", "strace", "ip"):
        if shutil.which(tool) is None:
            print(f"error: {tool} is not installed (Debian: util-linux, strace, iproute2)", file=sys.stderr)
            return 2
    logs = args.out / "offline"
    logs.mkdir(parents=True, exist_ok=True)
    for old in ("audit.jsonl", "strace.log"):
        (logs / old).unlink(missing_ok=True)
    proc = subprocess.Popen(command(args.fixtures, args.out, extra), cwd=ROOT, env=os.environ.copy())
    code = proc.wait()
    if code != 0 and not (logs / "strace.log").exists():
        print("error: could not enter a network namespace (needs root or user namespaces)", file=sys.stderr)
        return code
    result = verdict(logs / "strace.log", logs / "audit.jsonl")
    report = {
        "fully_local": result.fully_local,
        "components": sorted(result.by_component()),
        "attempts": [asdict(a) for a in result.attempts],
        "problems": result.problems,
        "replay_exit_code": code,
    }
    (logs / "verdict.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print(result.text())
    for problem in result.problems:
        print(f"warning: {problem}", file=sys.stderr)
    print(f"verdict: {logs / 'verdict.json'}")
    return code if code else (0 if result.fully_local else 3)


if __name__ == "__main__":
    raise SystemExit(main())
