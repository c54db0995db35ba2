"""How the report's fixed trace files under tests/data/report/ were made (run once, committed).

    .venv/bin/python -m tests.report_fixtures [OUT]     # OUT defaults to tests/data/report

Every run is the replay command on the virtual clock with the scripted stages, so the times
are exact and repeatable (fixed epoch, seeded jitter); only the trace and span ids are random.
Some runs are then edited, deterministically, to stand for what the simulator cannot produce:

- experiment/: A, B, B' in per-sentence mode, 3 rounds x 3 questions. A is a slower, jittery
  first token with fast generation (a cloud API, no server timings); B and B' a faster first
  token with slow generation, and llama.cpp-style server timings added to every LLM call
  (queue 1.5-2.5 ms, 0.3 ms loopback network, the rest prompt processing). In B' one measured
  turn (en01, round 2) fails: its TTS could not reach an endpoint with the network cut.
- drift/: a B run of 5 rounds x 2 questions made to drift: turn k's first token (and so
  everything after it) comes k x 40 ms later, and lab.temp_c rises 1.2 °C a turn from 41 °C.
- failed/: B' with a 1.5 s turn limit: every turn times out.
- jaeger/: a B run of 2 rounds x 1 question as Jaeger's /api/v3/traces answers it: base64
  ids, enum names, two streamed ``{"result": ...}`` documents.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pipeline.analysis.read import rows_from_spans
from pipeline.analysis.traces import ReadProblems, read_trace_file
from pipeline.records.bench_csv import BenchCsv
from pipeline.tracing import names

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "report"
A_TOML = "[llm.latency]\nfirst_ms = 520\nper_item_ms = 25\njitter_ms = 90\nseed = 2\n"
B_TOML = "[llm.latency]\nfirst_ms = 300\nper_item_ms = 110\njitter_ms = 15\nseed = 2\n"
DRIFT_STEP_NS = 40_000_000
Span = dict[str, Any]


def replay(out: Path, run_id: str, condition: str, extra_toml: str, *args: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    config = out / f"{run_id}.toml"
    config.write_text(extra_toml, encoding="utf-8")
    cmd = [sys.executable, "-m", "pipeline.replay", str(ROOT / "audio_fixtures"), "--config"]
    cmd += [str(ROOT / "configs" / "simulator.toml"), "--config", str(config), "--clock", "virtual", "--quiet"]
    cmd += ["--out", str(out), "--run-id", run_id, "--condition", condition, *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}  # never export the fixtures anywhere
    subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=ROOT)
    return out / "traces" / f"{run_id}.jsonl"


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_lines(path: Path, data: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(d, ensure_ascii=False, separators=(",", ":")) + "\n" for d in data)
    path.write_text(text, encoding="utf-8")


def spans(data: dict[str, Any]) -> Iterator[Span]:
    for rs in data.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            yield from ss.get("spans", [])


def attr(span: Span, key: str) -> Any:
    for a in span.get("attributes", []):
        if a["key"] == key:
            return next(iter(a["value"].values()))
    return None


def set_attr(span: Span, key: str, value: object) -> None:
    if isinstance(value, bool):
        encoded: dict[str, object] = {"boolValue": value}
    elif isinstance(value, int):
        encoded = {"intValue": str(value)}
    elif isinstance(value, float):
        encoded = {"doubleValue": value}
    else:
        encoded = {"stringValue": str(value)}
    span["attributes"] = [a for a in span.get("attributes", []) if a["key"] != key]
    span["attributes"].append({"key": key, "value": encoded})


def event_ns(span: Span, name: str) -> int | None:
    return next((int(e["timeUnixNano"]) for e in span.get("events", []) if e["name"] == name), None)


def add_server_timings(data: dict[str, Any]) -> None:
    """llama.cpp-style timings on every LLM call that has a first token."""
    for span in spans(data):
        first = event_ns(span, names.EV_FIRST_TOKEN)
        if span["name"] != names.LLM_CALL or first is None:
            continue
        index = int(attr(span, names.CALL_INDEX) or 0)
        wait = (first - int(span["startTimeUnixNano"])) / 1e6
        queue = 1.5 + 0.5 * (index % 3)
        set_attr(span, names.SERVER_QUEUE_MS, round(queue, 3))
        set_attr(span, names.SERVER_PROMPT_MS, round(max(wait - queue - 0.3, 0.0), 3))
        set_attr(span, names.SERVER_PREDICTED_MS, round((int(span["endTimeUnixNano"]) - first) / 1e6 - 0.2, 3))


def fail_tts(data: dict[str, Any]) -> None:
    """The turn's TTS fails (network cut): error status, no playback."""
    for rs in data["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            ss["spans"] = [s for s in ss["spans"] if s["name"] != names.PLAYBACK]
    for span in spans(data):
        if span["name"] == names.TTS:
            span["status"] = {"code": 2, "message": "ConnectionError"}
        if span["name"] == names.TURN:
            set_attr(span, names.OK, False)
            set_attr(span, names.ERROR_TYPE, "ConnectionError")
            set_attr(span, names.ERROR_MESSAGE, "tts: could not reach the TTS endpoint (network cut)")
            span["status"] = {"code": 2, "message": "ConnectionError"}


def turn_of(data: dict[str, Any]) -> Span | None:
    return next((s for s in spans(data) if s["name"] == names.TURN), None)


def edit_turns(path: Path, edit: Callable[[dict[str, Any], Span], None]) -> None:
    data = lines(path)
    for line in data:
        turn = turn_of(line)
        if turn is not None:
            edit(line, turn)
    write_lines(path, data)


def _shift(span: Span, shift: Callable[[int], int]) -> None:
    for key in ("startTimeUnixNano", "endTimeUnixNano"):
        span[key] = str(shift(int(span[key])))
    for e in span.get("events", []):
        e["timeUnixNano"] = str(shift(int(e["timeUnixNano"])))


def _warp(offset: int, extra: int, pivot: int) -> Callable[[int], int]:
    return lambda t: t + offset + (extra if t >= pivot else 0)


def make_drift(path: Path) -> None:
    """Turn k's first token k x 40 ms later; later turns move on by what earlier turns gained."""
    data = lines(path)
    offset = 0
    for k, line in enumerate(data):
        turn = turn_of(line)
        if turn is None:  # the session span, last: it ends when the last turn does
            for span in spans(line):
                span["endTimeUnixNano"] = str(int(span["endTimeUnixNano"]) + offset)
            continue
        calls = [s for s in spans(line) if s["name"] == names.LLM_CALL]
        firsts = [t for s in calls if (t := event_ns(s, names.EV_FIRST_TOKEN)) is not None]
        pivot = min(firsts) if firsts else int(turn["endTimeUnixNano"])
        for span in spans(line):
            _shift(span, _warp(offset, k * DRIFT_STEP_NS, pivot))
        set_attr(turn, names.TEMP_C, round(41.0 + 1.2 * k, 1))
        offset += k * DRIFT_STEP_NS
    write_lines(path, data)


def jaeger_answer(path: Path, documents: int = 2) -> str:
    """A trace file as Jaeger's api_v3 answers it: base64 ids, enum names, streamed documents."""
    all_spans: list[Span] = []
    resource: dict[str, Any] = {}
    for line in lines(path):
        for rs in line["resourceSpans"]:
            resource = rs.get("resource", resource)
            for ss in rs["scopeSpans"]:
                all_spans.extend(ss["spans"])
    for span in all_spans:
        for key in ("traceId", "spanId", "parentSpanId"):
            if span.get(key):
                span[key] = base64.b64encode(bytes.fromhex(span[key])).decode("ascii")
        span["kind"] = "SPAN_KIND_INTERNAL"
        code = span.get("status", {}).get("code", 0)
        span["status"] = {
            **span.get("status", {}),
            "code": ["STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"][code],
        }
    size = -(-len(all_spans) // documents)
    chunks = [all_spans[i : i + size] for i in range(0, len(all_spans), size)]
    docs = [
        {
            "result": {
                "resourceSpans": [
                    {"resource": resource, "scopeSpans": [{"scope": {"name": "voice-latency-lab"}, "spans": c}]}
                ]
            }
        }
        for c in chunks
    ]
    return "\n".join(json.dumps(d, ensure_ascii=False, separators=(",", ":")) for d in docs) + "\n"


def bench_from_traces(folder: Path) -> None:
    """bench.csv recomputed from the (edited) traces, as the replay would have written it."""
    problems = ReadProblems()
    found = [s for f in sorted((folder / "traces").glob("*.jsonl")) for s in read_trace_file(f, problems)]
    (folder / "bench.csv").unlink(missing_ok=True)
    BenchCsv(folder / "bench.csv").append(rows_from_spans(found, problems))


def main(out: Path = DATA) -> None:
    per_sentence = ("--mode", "per-sentence", "--rounds", "3", "--limit", "3")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        exp = out / "experiment"
        for name in ("a1", "b1", "bp1"):
            (exp / "traces" / f"{name}.jsonl").unlink(missing_ok=True)
        replay(work / "exp", "a1", "A", A_TOML, *per_sentence)
        replay(work / "exp", "b1", "B", B_TOML, *per_sentence)
        replay(work / "exp", "bp1", "B'", B_TOML, *per_sentence)
        for name in ("a1", "b1", "bp1"):
            write_lines(exp / "traces" / f"{name}.jsonl", lines(work / "exp" / "traces" / f"{name}.jsonl"))
        for name in ("b1", "bp1"):
            edit_turns(exp / "traces" / f"{name}.jsonl", lambda line, _turn: add_server_timings(line))

        def fail_one(line: dict[str, Any], turn: Span) -> None:
            if attr(turn, names.QUESTION_ID) == "en01" and int(attr(turn, names.ROUND)) == 2:
                fail_tts(line)

        edit_turns(exp / "traces" / "bp1.jsonl", fail_one)
        bench_from_traces(exp)

        drift = replay(work / "drift", "d1", "B", B_TOML, "--rounds", "5", "--limit", "2")
        make_drift(drift)
        write_lines(out / "drift" / "traces" / "d1.jsonl", lines(drift))

        failed = replay(work / "failed", "f1", "B'", B_TOML, "--rounds", "2", "--limit", "2", "--timeout", "1.5")
        write_lines(out / "failed" / "traces" / "f1.jsonl", lines(failed))

        small = replay(work / "jaeger", "j1", "B", B_TOML, "--rounds", "2", "--limit", "1")
        (out / "jaeger").mkdir(parents=True, exist_ok=True)
        (out / "jaeger" / "api_v3_traces.json").write_text(jaeger_answer(small), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)
