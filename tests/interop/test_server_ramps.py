"""The capacity mode of scripts/interop/xiaozhi_server.py: its ramp command, CPU meter, questions and table."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from pipeline.interop.capacity_mode import fixtures_without
from pipeline.interop.process_group import InteropError
from pipeline.interop.ramp_table import SHOWN, ramp_markdown, step_table
from pipeline.interop.server_ramps import (
    EndedRamp,
    ProcessCpu,
    RampSettings,
    RampTarget,
    cpu_seconds,
    passed_on,
    ramp_argv,
)
from pipeline.records.ramp_result import STEP_COLUMNS, Capacity, Quantiles, Step, write
from pipeline.records.truth import TRUTH, read_truth
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT


def test_the_ramp_command_names_the_server_its_pid_and_what_was_asked() -> None:
    settings = RampSettings("1,2,5", "30s", margin="25%", profile=Path("load.toml"), extra=("--seed", "3"))
    target = RampTarget("ws://127.0.0.1:9/xiaozhi/v1/", "lab server, A", 4242, Path("serve/traces"))
    argv = ramp_argv("py", Path("fx"), target, settings, Path("out/real"))
    assert argv == [
        *(
            "py",
            "-m",
            "pipeline.capacity",
            "fx",
            "--server",
            "ws://127.0.0.1:9/xiaozhi/v1/",
            "--label",
            "lab server, A",
        ),
        *("--steps", "1,2,5", "--hold", "30s", "--out", "out/real", "--server-pid", "4242"),
        *("--server-traces", "serve/traces", "--margin", "25%", "--profile", "load.toml", "--seed", "3"),
    ]
    bare = ramp_argv("py", Path("fx"), RampTarget("mqtt://h:1", "gw"), RampSettings("1", "5s"), Path("o"))
    assert not {"--server-pid", "--server-traces", "--margin", "--profile"} & set(bare)


def test_the_meter_reads_a_live_process_and_none_for_one_that_is_gone() -> None:
    assert cpu_seconds(os.getpid()) is not None
    assert cpu_seconds(2**22 + 17) is None  # above pid_max's default: never a live process
    meter = ProcessCpu({"me": os.getpid(), "gone": 2**22 + 17})
    meter.start(100.0)
    sum(i * i for i in range(200_000))  # some CPU of our own
    means = meter.stop(101.0)
    assert means["gone"] is None
    assert means["me"] is not None and means["me"] >= 0


def test_excluded_questions_leave_a_manifest_without_them_and_the_rest_linked(tmp_path: Path) -> None:
    folder = fixtures_without(ROOT / "audio_fixtures", "zh02, zh06", tmp_path / "fx")
    with (folder / "manifest.csv").open(encoding="utf-8", newline="") as fh:
        ids = [row["id"] for row in csv.DictReader(fh)]
    assert "zh02" not in ids and "zh06" not in ids and ids[:3] == ["zh01", "en01", "en02"]
    assert (folder / "zh01.wav").resolve() == (ROOT / "audio_fixtures" / "zh01.wav").resolve()
    kept = read_truth(folder / TRUTH)
    assert (
        set(kept) == {f"{q}.wav" for q in ids}
        and kept["zh01.wav"] == read_truth(ROOT / "audio_fixtures" / TRUTH)["zh01.wav"]
    )


def test_an_unknown_question_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(InteropError, match="zh99 not in"):
        fixtures_without(ROOT / "audio_fixtures", "zh01,zh99", tmp_path / "fx")


def test_excluding_every_question_is_refused(tmp_path: Path) -> None:
    every = ",".join(f"{lang}{i:02d}" for lang in ("zh", "en") for i in range(1, 16))
    with pytest.raises(InteropError, match="leaves no question"):
        fixtures_without(ROOT / "audio_fixtures", every, tmp_path / "fx")


def step(devices: int, verdict: str, p90: float, run_id: str) -> Step:
    return Step(
        devices, run_id, "c", f"steps/{devices}", 10, {"refused": 1}, Quantiles(p90=p90), None, None, 60.0,
        None, None, 0, None, None, verdict, "",
    )  # fmt: skip


def test_the_table_gives_each_servers_verdict_cpu_and_its_steps_as_written(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    steps = [step(1, "holds", 900.4, "a"), step(5, "fails", 1900.6, "b")]
    write(ws, Capacity("ws://x", "websocket", "f", {}, [1, 5], 60, 300, 10, 50, 5, steps))
    ramps = [
        EndedRamp("real server, A", ws, "step 5: fails\ndevices held: 2\ngrew first: to ASR\n", 0, {"server": 55.4}),
        EndedRamp("lab server, A", tmp_path / "none", "error: cannot reach\n", 2, {"server": None, "cloud": 3.0}),
        EndedRamp("gw", tmp_path / "none", "devices held: 50 or more (no step failed)\n", 0, {}),
    ]
    text = ramp_markdown(ramps, "# intro\n\n")
    assert "| real server, A | 2 | to ASR | 0 | 55% | - | - | - |" in text
    assert "| lab server, A | - | - | 2 | - | - | - | 3% |" in text
    assert "| gw | 50 or more (no step failed) | - | 0 | - | - | - | - |" in text
    assert "| devices | verdict | turns | silence_p50_ms | silence_p90_ms | silence_p99_ms | " in text
    assert "| 1 | holds | 10 | - | 900.4 | - | - | - | - | 0 | 0 | 1 | 0 | - | - | - | 60.0 | - |" in text
    assert "| 5 | fails | 10 | - | 1900.6 | - | - | - | - | 0 | 0 | 1 | 0 | - | - | - | 60.0 | - |" in text
    assert (
        "| devices | real server, A | lab server, A | gw |\n|---|---|---|---|\n| 1 | 900 holds | - | - |\n"
        "| 5 | 1901 fails | - | - |" in text
    )
    assert "(no steps.csv, or no step in it: the ramp measured no step)" in text
    assert "The ramp ended with code 2; its output ends:\n\n```\nerror: cannot reach\n```" in text


def test_the_table_shows_every_column_it_names_and_says_when_steps_csv_cannot_be_read(tmp_path: Path) -> None:
    assert set(SHOWN) <= set(STEP_COLUMNS)
    (tmp_path / "steps.csv").write_text("devices,verdict\n1,holds\n", encoding="utf-8")
    assert step_table(tmp_path) == [f"({tmp_path / 'steps.csv'}: its columns are not the ones this version writes)"]


def test_a_soak_is_shown_window_by_window_under_its_ramp(tmp_path: Path) -> None:
    from tests.report.sections.test_soak_windows import written

    soaked = written(tmp_path / "soak", rising=True).parent
    ramps = [EndedRamp("real server, A", soaked, "held: 8\n", 0, {}), EndedRamp("lab", tmp_path / "no", "", 0, {})]
    text = ramp_markdown(ramps, "# intro\n\n")
    assert "Soak: 8 device(s) held 4 min in windows of 60 s (4 written): drifted (" in text
    assert "| window | s | turns | silence P50 ms [95 % CI] |" in text
    assert "| 4 | 180-240 | 12 | 1800 [1780, 1820] | 1900 [1860, 1940] | 1 | 55 % | 380-381 | 40, 6 |" in text
    assert "| figure | first | last | rho | per hour | drifted | why |" in text
    assert text.count("Soak: ") == 1  # the ramp without a soak shows none
    (soaked / "soak.json").write_text("{", encoding="utf-8")
    assert "Unreadable soak result: " in ramp_markdown(ramps[:1], "")


def test_only_the_options_given_are_passed_on() -> None:
    given = {"--min-turns": 8, "--think": "15s", "--soak": None, "--window": ""}
    assert passed_on(given) == ("--min-turns", "8", "--think", "15s")
