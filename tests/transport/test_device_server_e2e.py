"""The packaged fixtures through ``python -m pipeline.serve`` (its own process) and ``pipeline.replay --server``:
the same transcripts and answers as in-process, rows on both sides, and the server stopped afterwards."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import replay
from pipeline.analysis.path.critical import critical_path
from pipeline.analysis.read import rows_from_spans
from pipeline.analysis.retiming import read_graphs
from pipeline.analysis.traces import ReadProblems, ReadSpan, read_trace_file, trace_files
from pipeline.records.bench_csv import read_bench_csv
from pipeline.records.turn_row import TurnRow
from pipeline.report.__main__ import main as report_main
from tests.paths import REPO_ROOT

pytestmark = pytest.mark.transport

ROOT = REPO_ROOT
FIXTURES = ROOT / "audio_fixtures"
SIMULATOR = ROOT / "configs" / "simulator.toml"


def rows(path: Path) -> list[TurnRow]:
    return read_bench_csv(path)


def start_server(out: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "pipeline.serve", str(FIXTURES), "--config", str(SIMULATOR)]
    command += ["--port", "0", "--out", str(out), "--quiet", *extra]
    server = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env and {**os.environ, **env}
    )
    assert server.stdout is not None
    line = server.stdout.readline()
    found = re.search(r"serving (ws://\S+)", line)
    if found is None:
        server.kill()
        raise AssertionError(f"no server: {line!r} {server.communicate(timeout=10)}")
    return server, found.group(1)


def stop(server: subprocess.Popen[str]) -> str:
    server.send_signal(signal.SIGINT)
    out, err = server.communicate(timeout=20)
    assert server.returncode == 0, err
    return out


def test_fixtures_over_websocket_match_in_process(tmp_path: Path) -> None:
    common = [str(FIXTURES), "--config", str(SIMULATOR), "--limit", "2", "--rounds", "2", "--quiet"]
    assert replay.main([*common, "--fast", "--out", str(tmp_path / "local")], env={}) == 0
    server, url = start_server(tmp_path / "server")
    try:
        device = replay.main(
            [*common, "--server", url, "--protocol-version", "2", "--out", str(tmp_path / "dev")], env={}
        )
    finally:
        said = stop(server)
    assert device == 0
    assert "4 turn(s)" in said
    local, dev, served = (rows(tmp_path / d / "bench.csv") for d in ("local", "dev", "server"))
    assert [r.question_id for r in dev] == [r.question_id for r in local] == [r.question_id for r in served]
    assert all(r.ok == 1 for r in [*local, *dev, *served])
    # the oracle ASR and scripted answers: what is heard and said must not change across the wire
    for a, b in zip(local, dev, strict=True):
        assert (a.asr_error_rate, a.answer_quality, a.sentences) == (
            b.asr_error_rate,
            b.answer_quality,
            b.sentences,
        )
    assert all(r.transport == "websocket" and (r.first_audible_ms or 0) > 0 for r in dev)
    assert all(r.transport == "" and r.first_token_ms and not r.whole_turn_ms for r in served)
    assert "xiaozhi server at ws://" in dev[0].llm_endpoint
    # one trace per turn across both processes: the server's turn span is a child of the device's
    device_turns = {s.span_id: s for s in turn_spans(tmp_path / "dev")}
    server_turns = turn_spans(tmp_path / "server")
    assert len(server_turns) == 4 and all(s.parent_span_id in device_turns for s in server_turns)
    assert all(s.trace_id == device_turns[s.parent_span_id].trace_id for s in server_turns)
    assert {r.trace_id for r in served} == {r.trace_id for r in dev}
    # the report gives a device's run its own section; an in-process run has none
    for folder, shown in (("dev", True), ("local", False)):
        assert report_main([str(tmp_path / folder), "--out", str(tmp_path / folder / "r")]) in (0, 1)
        md = (tmp_path / folder / "r" / "report.md").read_text(encoding="utf-8")
        assert ("2b. The device and the wire" in md) is shown
    md = (tmp_path / "dev" / "r" / "report.md").read_text(encoding="utf-8")
    transport = next(line for line in md.splitlines() if line.startswith("| transport |"))
    assert "websocket" in transport and "packets lost" not in md  # TCP loses nothing
    assert "first sound, split" not in md  # the device's traces alone cannot split it
    # both ends' traces together: each device row's first sound splits into four measured parts
    problems = ReadProblems()
    both = [
        s for d in ("dev", "server") for f in trace_files(tmp_path / d / "traces") for s in read_trace_file(f, problems)
    ]
    joined = [r for r in rows_from_spans(both) if r.transport]
    assert len(joined) == 4
    for r in joined:
        parts = [r.uplink_ms, r.server_first_audio_ms, r.downlink_ms, r.device_buffer_ms]
        assert all(isinstance(v, float) and v >= 0 for v in parts), parts
        assert abs(sum(parts) - r.first_audible_ms) < 0.01  # type: ignore[arg-type, operator]
    # and each device turn's critical path crosses the wire twice, summing exactly to what the device measured
    files = [*trace_files(tmp_path / "dev" / "traces"), *trace_files(tmp_path / "server" / "traces")]
    by_turn = {(r.question_id, r.round): r for r in joined}
    graphs = read_graphs(files).graphs
    assert len(graphs) == 2  # the measured round's device turns (the warm-up's are left out)
    for g in graphs:
        row = by_turn[(g.question_id, g.round)]
        silence, whole = critical_path(g, g.first_audible), critical_path(g, g.last_played)
        assert sum(s.ns for s in silence.steps) == silence.total_ns and sum(s.ns for s in whole.steps) == whole.total_ns
        assert (round(silence.total_ns / 1e6, 3), round(whole.total_ns / 1e6, 3)) == (
            row.first_audible_ms,
            row.whole_turn_ms,
        )
        kinds = silence.by_kind()
        assert kinds["uplink"] > 0 and kinds["downlink"] > 0 and kinds["device_buffer"] >= 0, kinds
    out = tmp_path / "both"
    assert report_main([str(tmp_path / "dev"), str(tmp_path / "server"), "--out", str(out)]) in (0, 1)
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "first sound, split: uplink" in md
    assert "4 server turn(s) joined to their device's turns" in md


def turn_spans(out: Path) -> list[ReadSpan]:
    problems = ReadProblems()
    spans = [s for f in trace_files(out / "traces") for s in read_trace_file(f, problems)]
    assert not problems.messages
    return [s for s in spans if s.name == "turn"]


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    server, url = start_server(tmp_path / "one")
    try:
        port = url.split(":")[2].split("/")[0]
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "pipeline.serve",
                str(FIXTURES),  # the simulator's oracle ASR needs the reference texts (else refused before the port)
                "--config",
                str(SIMULATOR),
                "--port",
                port,
                "--out",
                str(tmp_path),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "ORT_DISABLE_TELEMETRY": "1"},
        )
    finally:
        stop(server)
    assert second.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in second.stderr


def test_fixtures_over_the_mqtt_front_end_and_udp_match_in_process(tmp_path: Path) -> None:
    common = [str(FIXTURES), "--config", str(SIMULATOR), "--limit", "2", "--rounds", "1", "--quiet"]
    assert replay.main([*common, "--fast", "--out", str(tmp_path / "local")], env={}) == 0
    key = {"LAB_MQTT_KEY": "Lab-signature-Key9"}
    server, _ws = start_server(
        tmp_path / "server", "--mqtt-port", "0", "--mqtt-signature-key-env", "LAB_MQTT_KEY", "--ota-port", "0", env=key
    )
    try:
        assert server.stdout is not None
        found = re.search(r"serving (mqtt://\S+) with audio on udp://", server.stdout.readline())
        ota = re.search(r"serving OTA at (\S+),", server.stdout.readline())
        assert found is not None and ota is not None
        # a device told everything by the OTA, as a stock firmware is at boot: no key needed
        told = replay.main([*common, "--server", ota.group(1), "--out", str(tmp_path / "ota")], env={})
        # the gateway's own variable name is the emulator's default: no flag needed
        wrong = replay.main([*common, "--server", found.group(1), "--out", str(tmp_path / "refused")], env={})
        signed = {"MQTT_SIGNATURE_KEY": key["LAB_MQTT_KEY"]}
        device = replay.main([*common, "--server", found.group(1), "--out", str(tmp_path / "dev")], env=signed)
    finally:
        stop(server)
    assert wrong != 0  # an unsigned device is refused
    assert told == 0 and all(r.ok == 1 for r in rows(tmp_path / "ota" / "bench.csv"))
    assert device == 0
    local, dev, served = (rows(tmp_path / d / "bench.csv") for d in ("local", "dev", "server"))
    assert all(r.ok == 1 for r in [*dev, *served])
    for a, b in zip(local, dev, strict=True):
        assert (a.asr_error_rate, a.answer_quality, a.sentences) == (
            b.asr_error_rate,
            b.answer_quality,
            b.sentences,
        )
    assert all(r.transport == "udp" and r.packets_lost == 0 for r in dev)
    assert all(r.packets_lost == 0 and r.packets_late == 0 for r in served)


def test_a_devices_turns_are_scored_against_the_truth_once_the_servers_traces_are_read_beside(tmp_path: Path) -> None:
    paused = ROOT / "audio_fixtures" / "paused"
    command = [sys.executable, "-m", "pipeline.serve", str(paused), "--config", str(SIMULATOR), "--port", "0"]
    server = subprocess.Popen(
        [*command, "--out", str(tmp_path / "server"), "--quiet"], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    found = re.search(r"serving (ws://\S+)", server.stdout.readline())
    try:
        assert found is not None
        common = [str(paused), "--config", str(SIMULATOR), "--limit", "2", "--rounds", "1", "--quiet"]
        assert replay.main([*common, "--server", found.group(1), "--out", str(tmp_path / "dev")], env={}) == 0
    finally:
        stop(server)
    # the device's own rows: the silence from where the user really finished
    dev = {r.question_id: r for r in rows(tmp_path / "dev" / "bench.csv")}
    assert set(dev) == {"zh01_paused", "zh01_plain"}
    cut, whole = dev["zh01_paused"], dev["zh01_plain"]
    assert cut.true_end_first_audible_ms is not None and cut.true_end_first_audible_ms < 0  # answered mid-question
    assert whole.true_end_first_audible_ms is not None and whole.true_end_first_audible_ms > 0
    # the end-point was the server's, its VAD span in the server's traces: alone, the device sees the cut in the
    # server's recognised text, which came before the user finished; what the server's VAD made of it, it cannot say
    seen = (cut.cut_off, cut.cut_off_by, whole.cut_off, whole.cut_off_by, cut.utterances)
    assert seen == (1, "stt", 0, "stt", None)
    # read beside the server's traces, the server's end-point scores the device's turn
    problems = ReadProblems()
    both = [
        s for d in ("dev", "server") for f in trace_files(tmp_path / d / "traces") for s in read_trace_file(f, problems)
    ]
    joined = {r.question_id: r for r in rows_from_spans(both) if r.transport}
    assert (joined["zh01_paused"].cut_off, joined["zh01_plain"].cut_off) == (1, 0)
    assert {r.cut_off_by for r in joined.values()} == {"declared"}
    assert (joined["zh01_paused"].utterances, joined["zh01_plain"].utterances) == (2, 1)
    delay = joined["zh01_plain"].endpoint_delay_ms
    # the simulator's VAD waits 600 ms of quiet after the speech it hears, which may end a little before the truth
    assert delay is not None and 500 < delay < 700
