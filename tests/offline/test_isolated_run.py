"""Condition B' for real: the replay in a network namespace with only loopback, under strace.

The local models must work there; a cloud endpoint must fail fast and be recorded;
and a component planted to look up a host name at start-up must be caught and named.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline.records.bench_csv import read_bench_csv
from tests.real_models import CACHE, FIXTURES, ROOT

PLANT = """\
import socket, threading
def _phone_home():
    try:
        socket.getaddrinfo("telemetry.plant.invalid", 443)
    except OSError:
        pass
threading.Thread(target=_phone_home, name="plant", daemon=True).start()
"""


def offline(tmp_path: Path, args: list[str], env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "out"
    command = [sys.executable, "scripts/offline_run.py", str(FIXTURES), "--out", str(out), "--quiet"]
    command += ["--model-cache", str(CACHE), *args]
    proc = subprocess.run(
        command, cwd=ROOT, env={**os.environ, **(env or {})}, timeout=600, capture_output=True, text=True
    )
    verdict = json.loads((out / "offline" / "verdict.json").read_text())
    return proc.returncode, verdict


@pytest.mark.real
def test_local_models_run_offline_and_a_planted_lookup_is_named(tmp_path: Path) -> None:
    plant = tmp_path / "plant"
    plant.mkdir()
    (plant / "sitecustomize.py").write_text(PLANT)
    code, verdict = offline(tmp_path, ["--limit", "1", "--rounds", "1"], {"PYTHONPATH": str(plant)})
    assert code == 3  # the replay succeeded, but something reached out
    assert verdict["fully_local"] is False and verdict["components"] == ["sitecustomize"]
    [attempt] = verdict["attempts"]
    assert attempt["kind"] == "name lookup" and attempt["destination"] == "telemetry.plant.invalid:443"
    [row] = read_bench_csv(tmp_path / "out" / "bench.csv")
    assert (row.condition, row.ok, row.scripted) == ("B'", 1, "")  # the local chain itself worked


@pytest.mark.realtime
def test_the_cloud_path_fails_fast_and_is_recorded(tmp_path: Path) -> None:
    cloud = tmp_path / "cloud.toml"
    cloud.write_text('[llm]\nimpl = "openai"\nmodel = "qwen-max"\n[cloud]\nbase_url = "https://api.cloud.invalid/v1"\n')
    sim = str(ROOT / "configs" / "simulator.toml")
    code, verdict = offline(tmp_path, ["--config", sim, "--config", str(cloud), "--limit", "2", "--rounds", "1"])
    rows = read_bench_csv(tmp_path / "out" / "bench.csv")
    assert [(r.ok, r.error) for r in rows] == [(0, "LlmUnreachable"), (0, "LlmUnreachable")]
    assert all(float(str(r.turn_start_ns)) > 0 for r in rows)
    assert verdict["fully_local"] is False and "stages.llm.openai.client" in str(verdict["components"])
    assert code == 3
