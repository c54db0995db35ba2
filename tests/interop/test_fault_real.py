"""The fault matrix against the real xiaozhi-esp32-server, in the parts that need no checkout of it: which cases
it can have, the questions its device asks, its log read for what it said, and a case it cannot have said so.
Its run against a real checkout is in the issue's note (``scripts/fault_matrix.py --real-server``)."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

from pipeline.interop.fault_cases import CASES, run_case
from pipeline.interop.fault_kinds import against_real
from pipeline.interop.fault_real import fixtures_of, server_said, why_not
from pipeline.settings.fixtures import load_questions
from tests.paths import REPO_ROOT

LOG = """\
261207 01:02:03[0.9.6_00000000000000][core.utils.util]-INFO-started
261207 01:02:04[0.9.6_SiOpLaOpnonoCh][core.providers.llm.openai.openai]-ERROR-Error in response generation: 503 at 1
261207 01:02:09[0.9.6_SiOpLaOpnonoCh][core.providers.llm.openai.openai]-ERROR-Error in response generation: 503 at 2
261207 01:02:09[0.9.6_SiOpLaOpnonoCh][core.connection]-ERROR-WebSocket closed
261207 01:02:10[0.9.6_SiOpLaOpno][core.handle.textMessageProcessor]-ERROR-收到未知类型消息：{"type":"lab"}
  a continuation line -ERROR- that is no record of its own
"""


def test_the_real_server_runs_the_cases_it_can_have_and_names_why_not_the_others() -> None:
    real = {name: why_not(against_real(c, Path("x"), Path("py"))) for name, c in CASES.items()}
    assert {n for n, why in real.items() if not why} == {
        *("kill", "kill-restart", "cut-5", "cut-60", "llm-503", "llm-reset", "llm-stall", "speech-stall"),
    }
    assert real["kill-worker"] == "the real server runs one process"
    assert "gateway" in real["udp-loss-5"] and "traces" in real["disk-full"]
    through = against_real(CASES["udp-loss-20"], Path("x"), Path("py"), gateway=Path("gw"))
    assert why_not(through) == "" and through.real_gateway == "gw"  # the UDP cases go through the real gateway


def test_a_case_it_cannot_have_is_a_row_saying_why(tmp_path: Path) -> None:
    result = run_case(against_real(CASES["disk-full"], tmp_path, tmp_path / "py"), tmp_path, os.environ, REPO_ROOT)
    assert result.status == "not run: the real server writes no traces of ours to fill a disk with"
    assert result.ledger is None and not (tmp_path / "disk-full").exists()


def test_its_device_asks_only_the_questions_its_end_pointing_leaves_whole(tmp_path: Path) -> None:
    case = against_real(CASES["llm-503"], tmp_path, tmp_path / "py")
    asked = [q.id for q in load_questions(fixtures_of(case, tmp_path / "case", REPO_ROOT)).questions]
    everything = [q.id for q in load_questions(REPO_ROOT / "audio_fixtures").questions]
    assert asked == [q for q in everything if q not in {"zh02", "zh06", "zh08"}]
    assert asked[: case.limit] == ["zh01", "en01", "en02", "zh03"]
    assert fixtures_of(CASES["llm-503"], tmp_path / "lab", REPO_ROOT) == REPO_ROOT / "audio_fixtures"


def test_what_the_real_server_said_is_its_error_lines_by_module_counted(tmp_path: Path) -> None:
    (tmp_path / "server.log").write_text(LOG, encoding="utf-8")
    (tmp_path / "server-2.log").write_text("261207 01:03:00[v][core]-INFO-up\n", encoding="utf-8")
    (tmp_path / "device.log").write_text(LOG, encoding="utf-8")  # not the server's
    assert server_said(tmp_path) == [
        "server-2: 0 ERROR line(s)",
        "server: 3 ERROR line(s): core.providers.llm.openai.openai: Error in response generation: 503 at 1 (x2); "
        "core.connection: WebSocket closed (x1)",
    ]


STAND_IN = """\
# A stand-in for the real server's app.py: the lab's server, on the port and providers that the copy's
# data/.config.yaml names, as the real server reads them (JSON is YAML).
import json, os, pathlib
config = json.loads(pathlib.Path("data/.config.yaml").read_text(encoding="utf-8"))
llm, asr = config["LLM"]["LabLLM"]["base_url"], config["ASR"]["OpenaiASR"]["base_url"]
here = pathlib.Path.cwd()
(here / "lab.toml").write_text(
    f'[llm]\\nimpl = "openai"\\nmodel = "emulated-cloud"\\ntools = false\\n[cloud]\\nbase_url = "{llm}"\\n'
    f'read_timeout_s = 30\\n[asr]\\nimpl = "service"\\nurl = "{asr}"\\n', encoding="utf-8")
os.chdir(REPO)
os.execv(PYTHON, [PYTHON, "-m", "pipeline.serve", "audio_fixtures", "--config", "configs/simulator.toml",
                  "--config", str(here / "lab.toml"), "--port", str(config["server"]["port"]),
                  "--out", str(here / "served")])
"""


@pytest.mark.transport
@pytest.mark.realtime
def test_a_case_against_a_stand_in_checkout_wires_its_providers_through_the_proxy(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout" / "main" / "xiaozhi-server"
    checkout.mkdir(parents=True)
    app = f"REPO = {str(REPO_ROOT)!r}\nPYTHON = {sys.executable!r}\n" + STAND_IN
    (checkout / "app.py").write_text(app, encoding="utf-8")
    (checkout / "config.yaml").write_text("server: {}\n", encoding="utf-8")
    case = against_real(CASES["llm-503"], checkout, Path(sys.executable))
    result = run_case(dataclasses.replace(case, limit=3, limit_s=120), tmp_path / "out", os.environ, REPO_ROOT)
    ledger = result.ledger
    assert result.status == "run" and ledger is not None, result.events
    assert ledger.whole and ledger.rows == ledger.planned == 3  # zh01, en01, en02: zh02 is left out
    assert set(ledger.failed) == {"no_audio_out"}, ledger.failed  # the turns the 503s cut, no other failure
    assert result.server_records == ["server: 0 ERROR line(s)"]  # a stand-in writes no loguru lines
    assert any("endpoint fails new requests: 503" in e for e in result.events)
    assert result.left_behind == [] and result.analyze == "same 3 rows"
