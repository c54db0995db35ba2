"""scripts/interop/pipecat_bot.py against the real Pipecat bot: pipecat-ai installed from PyPI into a venv of its own,
the bot started on loopback under strace, two turns asked over each wire it speaks (Twilio Media Streams, its own
protobuf frames), every turn answered, the bot's marks beside the caller's, nothing reached outside loopback, and no
process left behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.records.bench_csv import read_bench_csv
from tests.paths import REPO_ROOT

pytestmark = [pytest.mark.install, pytest.mark.transport, pytest.mark.realtime]

SCRIPT = REPO_ROOT / "scripts" / "interop" / "pipecat_bot.py"
STAND_INS = REPO_ROOT / "configs" / "capacity-services.toml"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pipecat") / "venv"  # made by the first test, taken as it is by the second


@pytest.mark.parametrize("wire", ["twilio", "pipecat"])
def test_a_pipecat_bot_from_pypi_is_called_and_measured_offline(tmp_path: Path, venv: Path, wire: str) -> None:
    out = tmp_path / "out"
    argv = [sys.executable, str(SCRIPT), "--limit", "1", "--rounds", "2", "--out", str(out), "--wire", wire]
    argv += ["--venv", str(venv), "--services-config", str(STAND_INS)]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = (out / "pipecat.md").read_text(encoding="utf-8")
    assert "- turns answered: 1 of 1 measured (2 of 2 with the warm-up)" in text
    assert "- offline: no connect or datagram outside loopback by the bot" in text
    measured = next(line for line in text.splitlines() if line.startswith("| en01 |"))
    cells = [c.strip() for c in measured.strip("|").split("|")]
    assert all(c != "-" for c in cells[1:]), measured  # every mark of the bot's and the caller's found
    rows = read_bench_csv(out / "runs" / f"pipecat-{wire}" / "bench.csv")
    assert [(r.ok, r.transport, r.answer_edges) for r in rows] == [(1, wire, "inferred")] * 2
    # Pipecat's own wire tells what the bot heard: its final transcription is the turn's stt
    assert all((r.stt_received_ms is not None) is (wire == "pipecat") for r in rows)
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True)
    assert left.stdout == "", left.stdout  # the bot, the services and the cloud all stopped
