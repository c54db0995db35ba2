"""The turns mode of scripts/interop/xiaozhi_server.py: the waits, the runs, their labels, and the waits in each
server's config."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from pipeline.interop.lab_server import lab_config
from pipeline.interop.real_server import Services, prepare_copy, server_config
from pipeline.interop.turns_mode import (
    LAB,
    REAL,
    ServerRun,
    TurnsOptions,
    TurnsRun,
    server_runs,
    shipped_wait,
    turns_problem,
    turns_runs,
    waits,
)

SERVICES = Services("http://l/v1", "m", "http://l/v1/audio/transcriptions", "http://l/v1/audio/speech", "k", "lab")
SHIPPED_CONFIG = """\
server:
  ip: 0.0.0.0
  port: 8000
ASR:
  SileroVAD:
    min_silence_duration_ms: 999  # not the VAD's: another section's key of the same name
VAD:
  SileroVAD:
    type: silero
    threshold: 0.5
    # min_silence_duration_ms: 100
    min_silence_duration_ms: 350  # 如果说话停顿比较长，可以把这个值设置大一些
  OtherVAD:
    min_silence_duration_ms: 50
LLM: {}
"""


def test_the_shipped_wait_is_read_from_the_checkouts_config(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(SHIPPED_CONFIG, encoding="utf-8")
    assert shipped_wait(tmp_path) == 350
    (tmp_path / "config.yaml").write_text("VAD:\n  SileroVAD:\n    threshold: 0.5\n", encoding="utf-8")
    assert shipped_wait(tmp_path) is None


def test_the_real_servers_config_carries_the_wait_and_keeps_its_other_vad_settings(tmp_path: Path) -> None:
    assert "VAD" not in server_config(SERVICES, 8000, 8003)  # outside turns mode the checkout's own
    config = server_config(SERVICES, 8000, 8003, 800)
    # only the wait: the server merges data/.config.yaml key by key over config.yaml
    assert config["VAD"] == {"SileroVAD": {"min_silence_duration_ms": 800}}
    folder = tmp_path / "server"
    folder.mkdir()
    (folder / "app.py").write_text("", encoding="utf-8")
    copy = prepare_copy(folder, tmp_path / "copy", SERVICES, 8000, 8003, 500)
    written = json.loads((copy / "data" / ".config.yaml").read_text(encoding="utf-8"))
    assert written["VAD"]["SileroVAD"]["min_silence_duration_ms"] == 500


def test_the_lab_config_carries_the_wait_in_its_xiaozhi_server_profile() -> None:
    vad = tomllib.loads(lab_config("A", "http://r/v1", "http://a", "http://t", "m", 500))["vad"]
    assert vad == {
        "impl": "silero",
        "model": "silero-vad",
        "profile": "xiaozhi-server",
        "xiaozhi_server": {"silence_ms": 500},
    }
    # without a wait, the profile's own (the shipped value): the settings as the usual run writes them
    assert "xiaozhi_server" not in tomllib.loads(lab_config("A", "http://r/v1", "http://a", "http://t", "m"))["vad"]


def test_without_waits_each_server_runs_once_with_its_own_setting() -> None:
    runs = server_runs(None, None, 200, lab=True)
    assert runs == [ServerRun(REAL), ServerRun(LAB)]
    assert [(r.label("A"), r.tag) for r in runs] == [("real server, A", ""), ("lab server, A", "")]
    assert server_runs(None, None, None, lab=False) == [ServerRun(REAL)]


def test_each_wait_is_a_run_of_the_real_server_and_the_lab_runs_at_the_first() -> None:
    runs = server_runs((200, 500, 800), None, 200, lab=True)
    assert [(r.server, r.wait_ms, r.shipped) for r in runs] == [
        (REAL, 200, True),
        (LAB, 200, True),
        (REAL, 500, False),
        (REAL, 800, False),
    ]
    assert runs[0].label("A") == "real server, VAD 200 ms shipped, A" and runs[0].tag == "-vad200"
    assert runs[2].label("B") == "real server, VAD 500 ms, B"
    # the first is marked shipped only where the checkout ships it
    assert not any(r.shipped for r in server_runs((300, 800), None, 200, lab=True))
    both = server_runs((200, 800), (200, 800), 200, lab=True)
    assert [(r.server, r.wait_ms) for r in both] == [(REAL, 200), (LAB, 200), (REAL, 800), (LAB, 800)]
    assert [r.server for r in server_runs((200, 800), None, 200, lab=False)] == [REAL, REAL]


def options(vad_waits: str | None = None, lab_vad_waits: str | None = None, capacity: bool = False) -> TurnsOptions:
    return TurnsOptions(vad_waits, lab_vad_waits, capacity, False, True, Path("paused"), 40, 2)


def test_the_waits_are_parsed_and_checked() -> None:
    assert waits("200,500, 800") == (200, 500, 800)
    for bad in ("200,x", "200,200", "0", ""):
        with pytest.raises(ValueError):
            waits(bad)
    assert turns_problem(options()) == "" and turns_problem(options("200,800")) == ""
    assert turns_problem(options("200,800", "500")) == "--lab-vad-waits: 500 not in --vad-waits"
    assert turns_problem(options(None, "200")) == "--lab-vad-waits needs --vad-waits"
    assert "not with --capacity" in turns_problem(options("200", capacity=True))
    said = "--vad-waits / --lab-vad-waits: '200,x': waits in ms, comma-separated (200,500,800)"
    assert turns_problem(options("200,x")) == said


class Done:
    def __init__(self, label: str, condition: str, folder: Path) -> None:
        self.label, self.condition, self.folder = label, condition, folder


def test_each_finished_run_is_scored_with_its_lab_traces_and_its_reference(tmp_path: Path) -> None:
    plan = server_runs((200, 800), None, 200, lab=True)
    finished = [Done(r.label("A"), "A", tmp_path / "runs" / str(i)) for i, r in enumerate(plan)]
    shipped = "real server, VAD 200 ms shipped, A"
    assert turns_runs(plan, finished, tmp_path) == [
        TurnsRun(shipped, "A", tmp_path / "runs" / "0", None, None),
        TurnsRun(
            "lab server, VAD 200 ms shipped, A",
            "A",
            tmp_path / "runs" / "1",
            tmp_path / "serve" / "A-vad200" / "traces",
            None,
        ),
        TurnsRun("real server, VAD 800 ms, A", "A", tmp_path / "runs" / "2", None, shipped),
    ]
