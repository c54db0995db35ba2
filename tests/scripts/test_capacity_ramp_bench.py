"""scripts/capacity_ramp_bench.py's pure parts: a variant read from the command line, the side-by-side table
from each ramp's capacity.json, the connections counted in /proc/net/tcp, and a py-spy raw profile summarised
(labtools/pyspy_top.py). No process is started: the ramps themselves are run by the bench."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest

from labtools import pyspy_top
from labtools.script_module import load_script
from pipeline.records.ramp_result import Capacity, read

bench = load_script("capacity_ramp_bench")  # the script's own logic, loaded from its file


def test_a_variant_is_a_name_and_the_servers_options_split_as_a_shell_would() -> None:
    assert bench.parse_variant("1 process=--downlink-codec firmware") == bench.Variant(
        "1 process", ("--downlink-codec", "firmware")
    )
    assert bench.parse_variant(" two = --processes 2 --run-id 'a b'").options == ("--processes", "2", "--run-id", "a b")
    assert bench.parse_variant("plain=").options == ()
    assert bench.parse_variant("eq=--downlink-codec=firmware").options == ("--downlink-codec=firmware",)


@pytest.mark.parametrize(
    ("text", "told"),
    [
        ("--processes 2", "NAME=SERVE OPTIONS"),
        ("=--processes 2", "NAME=SERVE OPTIONS"),
        ("p=--port 9000", "--port is the bench's own"),
        ("p=--out=/tmp/x", "--out=/tmp/x is the bench's own"),
        ("p=--run-id 'a", "cannot be split"),
    ],
)
def test_a_variant_the_bench_cannot_run_is_refused_with_its_text(text: str, told: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=told) as refused:
        bench.parse_variant(text)
    assert repr(text) in str(refused.value)


def test_the_before_variant_runs_first_with_the_first_variants_options_from_its_checkout() -> None:
    args = argparse.Namespace(variant=[bench.parse_variant("a=--x 1"), bench.parse_variant("b=")], before="HEAD~1")
    variants = bench.variants_of(args, Path("/tmp/before"))
    assert variants == [
        bench.Variant("a @ HEAD~1", ("--x", "1"), Path("/tmp/before")),
        bench.Variant("a", ("--x", "1")),
        bench.Variant("b", ()),
    ]
    defaults = bench.variants_of(argparse.Namespace(variant=None, before=None), None)
    assert [(v.name, v.options[-2:]) for v in defaults] == [
        ("1 process", ("--downlink-codec", "firmware")),
        ("2 processes", ("--processes", "2")),
    ]


def step(devices: int, p90: float | None, verdict: str, cpu: float | None) -> dict[str, Any]:
    """One step of a capacity.json, as pipeline.capacity writes it."""
    return {
        **{"devices": devices, "run_id": f"r{devices}", "config_id": "c", "folder": f"steps/{devices}"},
        **{"turns": 20, "failures": {}, "silence_ms": {"p50": None, "p90": p90, "p99": None}},
        **{"whole_turn_p50_ms": None, "whole_turn_p90_ms": None, "held_s": 30.0},
        **{"lateness_p50_ms": 0.5, "lateness_p99_ms": 2.0, "lateness_sends": 100},
        **{"server_cpu_pct": cpu, "server_rss_mb": 300.0, "verdict": verdict, "reason": ""},
    }


def capacity(folder: Path, steps: list[dict[str, Any]], held: int | None, none_failed: bool) -> Capacity:
    """A capacity.json written and read back as the bench reads it."""
    found = {
        **{"server": "ws://127.0.0.1:9/xiaozhi/v1/", "transport": "websocket", "fixtures": "f", "profile": {}},
        **{"steps_planned": [1, 100, 200], "hold_s": 30.0, "max_hold_s": 240.0, "margin_pct": 10.0},
        **{"margin_floor_ms": 50.0, "min_turns": 8, "steps": steps, "devices_held": held, "knee": held},
        **{"none_failed": none_failed, "stopped": "", "label": folder.name},
    }
    folder.mkdir()
    (folder / "capacity.json").write_text(json.dumps(found))
    return read(folder / "capacity.json")


def test_the_table_puts_each_variants_steps_side_by_side_with_devices_held_its_baseline_and_limit(
    tmp_path: Path,
) -> None:
    one = capacity(
        tmp_path / "one",
        [step(1, 1200.4, "holds", 41.0), step(100, 1301.0, "holds", 95.4), step(200, 1500.0, "fails", 180.0)],
        100,
        False,
    )
    # a baseline P90 of 400 ms: its 10 % (40 ms) is below the 50 ms floor, so the floor makes the limit
    two = capacity(tmp_path / "two", [step(1, 400.0, "holds", None), step(100, None, "too_few", 60.0)], 1, True)
    assert bench.side_by_side({"1 process": one, "2 processes": two, "broken": None}) == [
        "devices                 1 process      2 processes  broken",
        "1                1200 holds (41%)        400 holds       -",
        "100              1301 holds (95%)  - too_few (60%)       -",
        "200             1500 fails (180%)                -       -",
        "devices held                  100        1 or more       -",
        "baseline P90              1200 ms           400 ms       -",
        "limit                     1320 ms           450 ms       -",
    ]


def test_a_variant_whose_first_step_did_not_hold_has_no_baseline_nor_limit(tmp_path: Path) -> None:
    found = capacity(tmp_path / "v", [step(1, 900.0, "void", 50.0)], None, False)
    assert bench.side_by_side({"v": found}) == [
        "devices                      v",
        "1               900 void (50%)",
        "devices held                 0",
        "baseline P90                 -",
        "limit                        -",
    ]


PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:BC35 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1
   1: 0100007F:BC35 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000  1000        0 2 1
   2: 0100007F:D2F0 0100007F:BC35 01 00000000:00000000 00:00000000 00000000  1000        0 3 1
   3: 0100007F:BC35 0100007F:D2F2 01 00000000:00000000 00:00000000 00000000  1000        0 4 1
   4: 0100007F:BC35 0100007F:D2F4 06 00000000:00000000 00:00000000 00000000  1000        0 5 1
"""


def test_connections_to_the_server_are_those_established_on_its_port_not_its_listener_nor_the_devices_ends() -> None:
    assert bench.established(PROC_NET_TCP, 0xBC35) == 2
    assert bench.established(PROC_NET_TCP, 0xD2F0) == 1
    assert bench.established(PROC_NET_TCP.splitlines()[0], 0xBC35) == 0


SERVE = 'process 10:"python -m pipeline.serve";_run_module_as_main (<frozen runpy>:198)'
LOOP = (
    f"{SERVE};BaseEventLoop.run_forever (asyncio/base_events.py:607);BaseEventLoop._run_once (asyncio/base_events.py:9)"
)
RAW = [
    f"{LOOP};Handle._run (asyncio/events.py:80);DeviceSession._audio (pipeline/transport/server/device_session.py:243);"
    "OpusDecoder.decode (pipeline/transport/wire/opus.py:160) 6",
    f"{LOOP};FineTimerSelector.select (pipeline/clock.py:90) 2",
    f'{SERVE};process 11:"python -m pipeline.serve";Thread._bootstrap (threading.py:995);Thread.run (threading.py:982);'
    "SileroBatcher.run (stages/vad/silero_batch.py:70);"
    "Session.run (onnxruntime/capi/onnxruntime_inference_collection.py:220) 10",
    "drain (pipeline/run/device_side.py:79) 2",  # a partial stack (--nonblocking): counted whole
    "",
    "not a stack line",
]


def test_a_raw_profile_counts_every_process_and_thread_and_leaves_the_loops_scaffolding_out_of_inclusive() -> None:
    found = pyspy_top.summarise(RAW)
    assert (found.total, dict(found.by_process)) == (20, {"10": 8, "11": 10})
    assert found.own.most_common(2) == [
        ("Session.run (onnxruntime_inference_collection.py)", 10),
        ("OpusDecoder.decode (opus.py)", 6),
    ]
    assert dict(found.under) == {
        "SileroBatcher.run (silero_batch.py)": 10,
        "Session.run (onnxruntime_inference_collection.py)": 10,
        "DeviceSession._audio (device_session.py)": 6,
        "OpusDecoder.decode (opus.py)": 6,
        "FineTimerSelector.select (clock.py)": 2,
        "drain (device_side.py)": 2,
    }
    assert pyspy_top.top_lines(found, 1) == [
        "20 samples of running threads; by process: 11 50%, 10 40%",
        "self:",
        "   50.0%  Session.run (onnxruntime_inference_collection.py)",
        "inclusive:",
        "   50.0%  SileroBatcher.run (silero_batch.py)",
    ]
    assert pyspy_top.top_lines(pyspy_top.summarise([]), 3) == ["no samples"]


def test_the_server_is_ready_at_its_own_serving_line_not_at_a_child_processes_forwarded_one() -> None:
    log = "[p1] serving ws://127.0.0.1:9/xiaozhi/v1/ (run r-p1)\n"
    assert re.search(bench.SERVING, log) is None
    log += "serving ws://127.0.0.1:9/xiaozhi/v1/ with 2 processes (runs r-p1 to -p2)\n"
    found = re.search(bench.SERVING, log)
    assert found is not None and found.group(1) == "ws://127.0.0.1:9/xiaozhi/v1/"
    assert re.search(bench.SERVING, "serving ws://127.0.0.1:9/xiaozhi/v1/ (run r)")
