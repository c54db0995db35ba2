"""Fault cases against real processes (issue 42, "nothing lost, checked"): a server killed and restarted, the
network cut for 5 s, the LLM endpoint answering 503, the server's disk full. After each, every turn the device
was asked to take is in exactly one row (ok or failed), its traces recompute the rows of its bench.csv, and no
process, port or temporary file was left behind."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest

from pipeline.interop.fault_cases import CASES, CaseResult, run_case
from pipeline.interop.fault_namespace import missing
from tests.paths import REPO_ROOT

pytestmark = [pytest.mark.transport, pytest.mark.realtime]


def run(name: str, tmp_path: Path, **changes: object) -> CaseResult:
    case = dataclasses.replace(CASES[name], **changes)  # type: ignore[arg-type]
    return run_case(case, tmp_path, os.environ, REPO_ROOT)


def assert_nothing_lost(result: CaseResult) -> None:
    said = f"{result.status}; events {result.events}; device saw {result.device_saw}"
    assert result.status == "run", said
    ledger = result.ledger
    assert ledger is not None
    assert ledger.whole, f"lost {ledger.lost}, doubled {ledger.duplicates}, unplanned {ledger.unplanned}; {said}"
    assert ledger.rows == ledger.planned
    assert result.analyze == f"same {ledger.rows} rows", result.analyze
    assert result.left_behind == [], result.left_behind


def test_a_server_killed_mid_turn_and_restarted(tmp_path: Path) -> None:
    result = run("kill-restart", tmp_path, limit=3, limit_s=90)
    assert_nothing_lost(result)
    ledger = result.ledger
    assert ledger is not None and ledger.failed == {"disconnected": 1}  # the turn the kill cut, said so
    assert ledger.recovery_s is not None and ledger.ok == 2


@pytest.mark.skipif(bool(missing()), reason=f"a network cut in a namespace of its own {missing()}")
def test_a_five_second_network_cut(tmp_path: Path) -> None:
    result = run("cut-5", tmp_path, limit=3, limit_s=90)
    assert_nothing_lost(result)
    assert any("network back" in e for e in result.events)


def test_the_llm_endpoint_answering_503(tmp_path: Path) -> None:
    result = run("llm-503", tmp_path, limit=3, duration_s=3.0, limit_s=90)
    assert_nothing_lost(result)
    ledger = result.ledger
    assert ledger is not None and ledger.rows - ledger.ok >= 1  # the turn asked during the 503s failed
    assert result.server_records and all("same" in r for r in result.server_records)


@pytest.mark.skipif(bool(missing()), reason=f"a small disk in a namespace of its own {missing()}")
def test_the_servers_disk_full(tmp_path: Path) -> None:
    result = run("disk-full", tmp_path, limit=2, limit_s=90)
    assert_nothing_lost(result)
    said = (tmp_path / "disk-full" / "logs" / "server.log").read_text()
    assert "cannot be written (No space left on device)" in said  # it stopped, saying why, rather than lose records
    assert "the server stopped rather than serve turns it cannot record" in said
    assert re.search(r"served but not recorded: \w+ round \d \((ok|failed \w+)\)", said)  # that turn, named
    # the server's own records: whole lines only, its bench.csv and its traces the same turns
    assert result.server_records and all(": same " in r and "unreadable" not in r for r in result.server_records)
