"""Spans go over the wire as OTLP, and a missing collector never blocks or breaks a run."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from pipeline.analysis.traces import ReadProblems, read_trace_file
from pipeline.replay import main
from pipeline.tracing.export import OtlpSettings, otlp_from_env
from tests.otlp_receivers import GrpcReceiver, HttpReceiver, Received
from tests.paths import REPO_ROOT

FIXTURES = REPO_ROOT / "audio_fixtures"
SIM = str(FIXTURES.parent / "configs" / "simulator.toml")
ARGS = [
    str(FIXTURES),
    "--config",
    SIM,
    "--clock",
    "virtual",
    "--rounds",
    "1",
    "--limit",
    "2",
    "--quiet",
    "--run-id",
    "wire",
]


def _check_against_file(received: Received, out: Path) -> None:
    file_spans = list(read_trace_file(out / "traces" / "wire.jsonl", ReadProblems()))
    wire = {s.span_id.hex(): s for s in received.spans}
    assert len(wire) == len(file_spans) > 10
    for span in file_spans:
        got = wire[span.span_id]
        assert got.name == span.name
        assert got.trace_id.hex() == span.trace_id
        assert got.parent_span_id.hex() == span.parent_span_id
        assert (got.start_time_unix_nano, got.end_time_unix_nano) == (span.start_ns, span.end_ns)
    turns = [s for s in received.spans if s.name == "turn"]
    [session] = [s for s in received.spans if s.name == "session"]
    assert len(turns) == 2 and all(t.parent_span_id == session.span_id for t in turns)
    turn_ids = {t.span_id for t in turns}
    children = [s for s in received.spans if s.name not in ("turn", "session")]
    assert children and all(s.parent_span_id in turn_ids for s in children)


def test_http_receiver_gets_every_span_with_its_parent(tmp_path: Path) -> None:
    with HttpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "wire-test"}
        assert main([*ARGS, "--out", str(tmp_path)], env=env) == 0
    _check_against_file(receiver.received, tmp_path)


def test_grpc_receiver_gets_every_span_with_its_parent(tmp_path: Path) -> None:
    with GrpcReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
        assert main([*ARGS, "--out", str(tmp_path)], env=env) == 0
    _check_against_file(receiver.received, tmp_path)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_missing_collector_neither_blocks_nor_breaks_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{_closed_port()}", "OTEL_EXPORTER_OTLP_TIMEOUT": "500"}
    started = time.monotonic()
    assert main([*ARGS, "--out", str(tmp_path)], env=env) == 0
    assert time.monotonic() - started < 8
    out = capsys.readouterr().out
    assert "0 span(s) sent" in out and "failed" in out
    assert (tmp_path / "traces" / "wire.jsonl").read_text().count("\n") == 3  # two turns and the session


def test_otlp_settings_follow_the_standard_variables() -> None:
    assert otlp_from_env({}) is None
    assert otlp_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318/"}) == OtlpSettings("http://h:4318/v1/traces")
    assert otlp_from_env(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    ) == OtlpSettings("http://h:4317", "grpc")
    assert otlp_from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://h:9/x"}) == OtlpSettings("http://h:9/x")
