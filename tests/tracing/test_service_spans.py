"""A trace file line says what the OTLP exporter sends: the lab writes OTLP JSON itself, the wire uses protobuf.

The file's JSON is written straight from the lab's span records; the exporter gets
the SDK's spans and encodes them with the OpenTelemetry encoder. Here both see the
same spans (turns of every shape, a job, requests, values of every attribute type,
more attributes and events than the SDK keeps), and the protobuf JSON mapping of
what the exporter would send must equal the file, span for span.
"""

from __future__ import annotations

import base64
import enum
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from pipeline.events import StageInfo
from pipeline.tracing import names
from pipeline.tracing import timeline as tl
from pipeline.tracing.export import Tracing
from pipeline.tracing.service_spans import RequestTiming

REMOTE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
S = 1_767_225_600_000_000_000


class _Level(enum.IntEnum):
    HIGH = 3


class _Tagged(str):
    def __str__(self) -> str:
        return "not its characters"


class _Keep(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def _turn(failed: bool) -> tl.TurnTimeline:
    roles = ("vad", "asr", "llm", "sentences", "tts", "player", "device", "downlink")
    t = tl.TurnTimeline(start_ns=S)
    t.stages = {r: StageInfo(r, f"impl-{r}", r == "asr", (("n", 1), ("x", 0.25), ("on", True))) for r in roles}
    t.vad = tl.VadTiming(S + 1, S + 5, 300, 900, S + 9, S + 10)
    t.asr = tl.AsrTiming(S + 10, None if failed else S + 20, 'héllo "wörld"\n', "en")
    queue = tl.QueueTiming(S + 20, S + 21, "high")
    t.calls = [
        tl.CallTiming(0, "answer", "m", 128, S + 21, "h:1", 5, S + 30, S + 31, S + 40, 3, 7, "tool_calls", "get"),
        tl.CallTiming(1, "after_tool", "m", 64, S + 45, end_ns=None if failed else S + 60),
    ]
    t.calls[0].server_timings, t.calls[0].token_ns, t.calls[0].queue = (("prompt_ms", 1.5),), [S + 29], queue
    t.tools = [
        tl.ToolTiming("get", S + 40, S + 44),
        tl.ToolTiming("dev", S + 41, None, where="device", call_id="7", error="boom" if failed else ""),
    ]
    t.sentences = [tl.SentenceTiming(0, "Yes.", 1, S + 45, S + 46, S + 50)]
    t.tts = [tl.TtsTiming(0, S + 50, S + 52, S + 60, 400), tl.TtsTiming(1, S + 55)]
    t.playback = tl.PlaybackTiming(S + 52, S + 70, 800, {1: S + 61, 0: S + 52})
    t.device = tl.DeviceTiming("websocket", 3, S, S + 8, S + 21, S + 30, S + 52, S + 53, S + 71, None, S + 70, "hi")
    t.device.sentence_starts = [(S + 51 + i, f"s{i}") for i in range(140)]  # more events than the SDK keeps
    t.downlink = tl.DownlinkTiming(S + 52, S + 69, 30)
    t.packets, t.dropped = tl.PacketCounts(100, 2, 1), {"z": 2, "a": 1}
    t.end_ns = None if failed else S + 72
    if failed:
        t.error_type, t.error_message = "timeout", "too long"
    return t


ODD: dict[str, Any] = {
    "nan": math.nan,
    "inf": -math.inf,
    "ints": [1, 2],
    "tuple": ("a", "b"),
    "empty": [],
    "big": 2**62,
    "whole": 300.0,
    "tiny": 2.5e-05,  # floats that json and msgspec write differently
    "huge": 1e16,
    "text": "日本語",
    "no": False,
    "blank": "",
    "zero": 0.0,
    "level": _Level.HIGH,
    "tagged": _Tagged("a"),
    "holes": [1, None],
}


def _write_everything(tracing: Tracing) -> None:
    tracing.emit_turn(_turn(False), {names.SCHEMA: "1"})  # before the session: a trace of its own
    tracing.start_session({names.RUN_ID: "r"}, S - 10)
    tracing.emit_turn(_turn(False), {names.SCHEMA: "1", **ODD})
    tracing.emit_turn(_turn(True), {f"a{i}": i for i in range(140)})  # more attributes than the SDK keeps
    tracing.emit_turn(_turn(False), {}, reserved=tracing.reserve_turn())
    tracing.emit_turn(_turn(False), {}, traceparent=REMOTE)
    job = tl.JobTimeline(0, "summarise", S, tl.QueueTiming(S + 1, S + 5, "low"), S + 9, None, 10, 5, "timeout", "x")
    tracing.emit_job(job, {"lab.job.kind": "summarise"})
    stage = StageInfo("asr", "whisper", False, (("model", "tiny"),))
    tracing.emit_request(RequestTiming(names.ASR, S, S + 50, stage, {"lab.asr.text": "hi"}, [("x", S + 1)]), REMOTE)
    tracing.emit_request(RequestTiming(names.TTS, S, None, None, error_type="bad_request", error_message="no text"))
    tracing.end_session(S + 100)
    tracing.shutdown()


def _hex_ids(span: dict[str, Any]) -> dict[str, Any]:
    for key in ("traceId", "spanId", "parentSpanId"):
        if span.get(key):
            span[key] = base64.b64decode(span[key]).hex()
    return span


def _spans(traces_data: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for rs in traces_data["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def test_the_file_says_what_the_exporter_sends(tmp_path: Path) -> None:
    wire = _Keep()
    _write_everything(Tracing(tmp_path / "t.jsonl", "test", exporter=wire))
    lines = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    sent: dict[str, Any] = MessageToDict(encode_spans(wire.spans), use_integers_for_enums=True)
    assert len(lines) == 9 and len(wire.spans) == sum(len(_spans(line)) for line in lines) > 40
    # every field of every span, the dropped counts among them, in the same order (the file's bytes)
    file_spans = {s["spanId"]: json.dumps(s) for line in lines for s in _spans(line)}
    wire_spans = {s["spanId"]: json.dumps(s) for s in map(_hex_ids, _spans(sent))}
    assert file_spans == wire_spans
    for line in lines:
        [resource_spans] = line["resourceSpans"]
        assert {k: v for k, v in resource_spans.items() if k != "scopeSpans"} == {
            k: v for k, v in sent["resourceSpans"][0].items() if k != "scopeSpans"
        }
        assert [ss["scope"] for ss in resource_spans["scopeSpans"]] == [{"name": "voice-latency-lab"}]


def test_every_line_is_written_as_json_dumps_writes_it(tmp_path: Path) -> None:
    tracing = Tracing(tmp_path / "t.jsonl", "test")
    _write_everything(tracing)
    tracing.emit_turn(_turn(False), {"ms": 12.25, "small": 1e-4, "big": 9.99e15, "list": [0.5, 1.0]})
    lines = (tmp_path / "t.jsonl").read_bytes().splitlines(keepends=True)
    assert len(lines) == 10
    for line in lines:
        assert line == (json.dumps(json.loads(line), ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def test_what_the_sdk_limits_cut_is_counted(tmp_path: Path) -> None:
    _write_everything(Tracing(tmp_path / "t.jsonl", "test"))
    lines = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    turn = next(s for s in _spans(lines[2]) if s["name"] == names.TURN)
    device = next(s for s in _spans(lines[2]) if s["name"] == names.DEVICE)
    assert len(turn["attributes"]) == 128 and turn["droppedAttributesCount"] > 0
    assert turn["attributes"][-1]["key"].startswith("lab.")  # the oldest went, as the SDK drops them
    assert len(device["events"]) == 128 and device["droppedEventsCount"] == 7 + 140 - 128  # 7 moments, 140 sentences
    assert device["events"][-1]["attributes"][1] == {"key": names.SENTENCE_TEXT, "value": {"stringValue": "s139"}}


def test_remote_and_local_parents_are_told_apart(tmp_path: Path) -> None:
    tracing = Tracing(tmp_path / "t.jsonl", "test")
    tracing.start_session({}, S)
    tracing.emit_turn(_turn(False), {}, traceparent=REMOTE)
    tracing.emit_turn(_turn(False), {}, traceparent="00-not-a-traceparent")
    tracing.end_session(S + 100)
    remote, local, session = (_spans(json.loads(line)) for line in (tmp_path / "t.jsonl").read_text().splitlines())
    assert remote[-1]["traceId"] == REMOTE.split("-")[1] and remote[-1]["parentSpanId"] == REMOTE.split("-")[2]
    assert remote[-1]["flags"] == 0x300 and {s["flags"] for s in remote[:-1]} == {0x100}
    assert local[-1]["parentSpanId"] == session[0]["spanId"] and local[-1]["flags"] == 0x100
