"""The committed fixture traces copied to any number of turns, for a large experiment to measure."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "data" / "report" / "experiment" / "traces"


def _ids(span: dict[str, Any], copy: int) -> None:
    for key in ("traceId", "spanId", "parentSpanId"):
        if span.get(key):
            span[key] = f"{copy:08x}{span[key][8:]}"


def _set(span: dict[str, Any], key: str, value: dict[str, Any]) -> None:
    for a in span["attributes"]:
        if a["key"] == key:
            a["value"] = value


def _moved(raw: bytes, copy: int, length: int) -> bytes:
    """One fixture line as copy ``copy``: new ids, ``copy`` run-lengths later, 3 * ``copy`` rounds on."""
    line = msgspec.json.decode(raw)  # a fresh copy to change
    for span in _spans(line):
        _ids(span, copy)
        for key in ("startTimeUnixNano", "endTimeUnixNano"):
            span[key] = str(int(span[key]) + copy * length)
        for e in span.get("events", []):
            e["timeUnixNano"] = str(int(e["timeUnixNano"]) + copy * length)
        if span["name"] == "turn":
            rnd = next(int(a["value"]["intValue"]) for a in span["attributes"] if a["key"] == "lab.round")
            _set(span, "lab.round", {"intValue": str(rnd + 3 * copy)})
            _set(span, "lab.warmup", {"boolValue": rnd == 1 and copy == 0})
    return msgspec.json.encode(line) + b"\n"  # compact UTF-8, as the exporter writes


def spread_traces(turns: int, folder: Path) -> int:
    """The fixture runs copied until ``turns`` turns: copy k moves 3k rounds on and k run-lengths later."""
    written = 0
    for path in sorted(FIXTURES.glob("*.jsonl")):
        lines = path.read_bytes().splitlines()
        source = [msgspec.json.decode(raw) for raw in lines]
        per_file = math.ceil(turns / 3)
        start = min(int(s["startTimeUnixNano"]) for d in source for s in _spans(d))
        length = max(int(s["endTimeUnixNano"]) for d in source for s in _spans(d)) - start
        with (folder / path.name).open("wb") as out:
            copy, done = 0, 0
            while done < per_file and written < turns:
                for raw in lines[:-1]:  # the session line last, once, is not needed for rows
                    if done >= per_file or written >= turns:
                        break
                    out.write(_moved(raw, copy, length))
                    done += 1
                    written += 1
                copy += 1
    return written


def _spans(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for rs in data["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
