"""The fast reading of trace files gives exactly what a plain ``json.loads`` reading gives.

The reference below reads a file as the reader did before it was made fast: text mode with
invalid UTF-8 replaced, ``json.loads`` per line refusing NaN and Infinity, dicts walked by
``spans_from_traces_data``. Every committed trace file must give the same spans (values and their types) and the
same rows through both, and every kind of odd line the same spans or the same complaint.
"""

from __future__ import annotations

import gc
import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline.analysis import traces
from pipeline.analysis.numbers import median, ms
from pipeline.analysis.rows import turn_row
from pipeline.analysis.traces import ReadEvent, ReadProblems, ReadSpan, read_trace_file
from pipeline.analysis.turns import TurnSpans, group_turns
from pipeline.report.load import load_paths
from tests.paths import TEST_DATA

DATA = TEST_DATA
TRACE_FILES = sorted(DATA.rglob("*.jsonl"))
LINE = (DATA / "report" / "experiment" / "traces" / "a1.jsonl").read_text(encoding="utf-8").splitlines()[0]


# --- the reference: the plain json.loads decoding, as the reader did it before it was made fast -------
# (``spans_from_traces_data`` is that decoding, kept unchanged as the fast reader's fallback)


def reference_read(path: Path) -> tuple[list[ReadSpan], list[str]]:
    spans: list[ReadSpan] = []
    messages: list[str] = []
    with path.open(encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                spans.extend(traces.spans_from_traces_data(json.loads(line, parse_constant=traces._no_constants)))
            except traces._UNREADABLE as exc:
                messages.append(f"{path}:{number}: unreadable trace line ({type(exc).__name__}: {exc})")
    return spans, messages


def fast_read(path: Path) -> tuple[list[ReadSpan], list[str]]:
    problems = ReadProblems()
    return list(read_trace_file(path, problems)), problems.messages


def typed(value: Any) -> Any:
    """``value`` with every leaf's type beside it: 1, 1.0 and True are equal, but not the same reading."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [typed(v) for v in value]
    if isinstance(value, (ReadSpan, ReadEvent)):
        return [type(value).__name__, *(typed(getattr(value, f)) for f in value.__struct_fields__)]
    return (type(value).__name__, repr(value))


# --- every committed trace file --------------------------------------------------------------------


def test_there_are_trace_files_to_compare() -> None:
    assert len(TRACE_FILES) >= 5


@pytest.mark.parametrize("path", TRACE_FILES, ids=lambda p: str(p.relative_to(DATA)))
def test_committed_trace_files_give_the_same_spans_and_rows(path: Path) -> None:
    fast, fast_messages = fast_read(path)
    plain, plain_messages = reference_read(path)
    assert fast_messages == plain_messages == []
    assert typed(fast) == typed(plain)
    fast_turns = group_turns(fast, ReadProblems())
    plain_turns = group_turns(plain, ReadProblems())
    assert fast_turns, "a trace file with turns"
    # each turn's row and its sentences' first-token times
    assert typed([turn_row(t) for t in fast_turns]) == typed([turn_row(t) for t in plain_turns])


@pytest.mark.parametrize("path", TRACE_FILES, ids=lambda p: str(p.relative_to(DATA)))
def test_committed_trace_lines_take_the_fast_decoding(path: Path) -> None:
    # otherwise the comparison above would be the plain decoding against itself
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    assert lines and all(traces._fast_spans(line) is not None for line in lines)


# --- odd lines: the same spans, or the same complaint at the same line ------------------------------


def _with(line: str, old: str, new: str) -> str:
    assert old in line
    return line.replace(old, new, 1)


ODD_LINES = {
    "NaN double": _with(LINE, '"doubleValue":0.5', '"doubleValue":NaN'),
    "Infinity double": _with(LINE, '"doubleValue":0.5', '"doubleValue":Infinity'),
    "-Infinity double": _with(LINE, '"doubleValue":0.5', '"doubleValue":-Infinity'),
    "1e400 double": _with(LINE, '"doubleValue":0.5', '"doubleValue":1e400'),
    "1e400 outside a value": _with(LINE, '"kind":1,', '"kind":1e400,'),
    "NaN outside a value": _with(LINE, '"kind":1,', '"kind":NaN,'),
    "double as a string": _with(LINE, '"doubleValue":0.5', '"doubleValue":"0.25"'),
    "NaN double as a string": _with(LINE, '"doubleValue":0.5', '"doubleValue":"NaN"'),
    "int as a number": _with(LINE, '"intValue":"540"', '"intValue":540'),
    "int as a float": _with(LINE, '"intValue":"540"', '"intValue":540.75'),
    "int with spaces and an underscore": _with(LINE, '"intValue":"540"', '"intValue":" 5_40 "'),
    "int not a number": _with(LINE, '"intValue":"540"', '"intValue":"five"'),
    "int beyond 64 bits": _with(LINE, '"intValue":"540"', '"intValue":123456789012345678901234567890'),
    "bool as a string": _with(LINE, '"boolValue":false', '"boolValue":"false"'),
    "string null": _with(LINE, '"stringValue":"energy"', '"stringValue":null'),
    "string a number": _with(LINE, '"stringValue":"energy"', '"stringValue":7'),
    "string an object": _with(LINE, '"stringValue":"energy"', '"stringValue":{"b":1,"a":[2]}'),
    "value missing": _with(LINE, ',"value":{"stringValue":"energy"}', ""),
    "value null": _with(LINE, '"value":{"stringValue":"energy"}', '"value":null'),
    "value a string": _with(LINE, '"value":{"stringValue":"energy"}', '"value":"energy"'),
    "value of another kind": _with(LINE, '{"stringValue":"energy"}', '{"kvlistValue":{"values":[]}}'),
    "value with two kinds": _with(LINE, '{"stringValue":"energy"}', '{"intValue":"3","stringValue":"energy"}'),
    "array of mixed values": _with(
        LINE, '{"stringValue":"energy"}', '{"arrayValue":{"values":[{"intValue":"1"},{"boolValue":true},{}]}}'
    ),
    "array without values": _with(LINE, '{"stringValue":"energy"}', '{"arrayValue":{}}'),
    "array with values null": _with(LINE, '{"stringValue":"energy"}', '{"arrayValue":{"values":null}}'),
    "duplicate key": _with(LINE, '"stringValue":"energy"', '"stringValue":"first","stringValue":"energy"'),
    "key a number": _with(LINE, '"key":"lab.stage.impl"', '"key":5'),
    "key a list": _with(LINE, '"key":"lab.stage.impl"', '"key":[5]'),
    "key missing": _with(LINE, '"key":"lab.stage.impl",', ""),
    "lone surrogate escape": _with(LINE, '"stringValue":"energy"', '"stringValue":"\\ud800x"'),
    "escaped text": _with(LINE, '"stringValue":"energy"', '"stringValue":"a\\"b\\\\c\\u00e9\\n"'),
    "start time a number": _with(
        LINE, '"startTimeUnixNano":"1767225600060000000"', '"startTimeUnixNano":1767225600060000000'
    ),
    "start time a float": _with(LINE, '"startTimeUnixNano":"1767225600060000000"', '"startTimeUnixNano":1.5e18'),
    "start time 1e400": _with(LINE, '"startTimeUnixNano":"1767225600060000000"', '"startTimeUnixNano":1e400'),
    "start time not a number": _with(LINE, '"startTimeUnixNano":"1767225600060000000"', '"startTimeUnixNano":"x"'),
    "span id a number": _with(LINE, '"spanId":"ee8d466101a03733"', '"spanId":7'),
    "span name a number": _with(LINE, '"name":"vad"', '"name":7'),
    "event name null": _with(LINE, '"name":"speech_start"', '"name":null'),
    "parent null": _with(LINE, '"parentSpanId":"c55738bb8b093a70"', '"parentSpanId":null'),
    "status code a string": _with(LINE, '"status":{}', '"status":{"code":"2"}'),
    "status code a name": _with(LINE, '"status":{}', '"status":{"code":"STATUS_CODE_ERROR"}'),
    "status null": _with(LINE, '"status":{}', '"status":null'),
    "event time missing": _with(LINE, '{"timeUnixNano":"1767225600660000000","name":"speech_start"}', '{"name":"x"}'),
    "spans null": _with(LINE, '"spans":[', '"spans":null,"x":['),
    "spans an object": _with(LINE, '"spans":[', '"spans":{"a":1},"x":['),
    "attributes an object": _with(LINE, '"attributes":[{"key":"lab.vad', '"attributes":{"a":1},"x":[{"key":"lab.vad'),
    "resource spans missing": '{"other":1}',
    "a list, not an object": "[1, 2]",
    "a number": "5",
    "truncated": LINE[: len(LINE) // 2],
    "trailing data": LINE + " x",
    "two objects": LINE + LINE,
}


@pytest.mark.parametrize("name", sorted(ODD_LINES))
def test_an_odd_line_reads_as_the_plain_decoding_reads_it(tmp_path: Path, name: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([LINE, ODD_LINES[name], LINE]) + "\n", encoding="utf-8")
    fast, fast_messages = fast_read(path)
    plain, plain_messages = reference_read(path)
    assert fast_messages == plain_messages
    assert typed(fast) == typed(plain)
    assert all(m.startswith(f"{path}:2: unreadable trace line") for m in fast_messages)


def test_a_start_time_too_large_for_an_integer_costs_its_line_not_the_report(tmp_path: Path) -> None:
    # json.loads reads 1e400 as infinity, which int() refuses with an OverflowError: before the
    # fast reading that error went through and stopped the report
    path = tmp_path / "t.jsonl"
    path.write_text(ODD_LINES["start time 1e400"] + "\n" + LINE + "\n", encoding="utf-8")
    spans, messages = fast_read(path)
    assert len(messages) == 1 and messages[0].startswith(f"{path}:1: unreadable trace line (OverflowError")
    assert len(spans) == len(fast_read_line(tmp_path, LINE))


def fast_read_line(tmp_path: Path, line: str) -> list[ReadSpan]:
    path = tmp_path / "one.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    return fast_read(path)[0]


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe" + LINE.encode()[2:],  # invalid UTF-8 where the line starts
        LINE.encode().replace(b'"energy"', b'"ene\xffrgy"', 1),  # invalid UTF-8 inside a string: replaced
        LINE.encode().replace(b'"energy"', b'"ene\xe4\xb8"', 1),  # a character cut short
        b"\xef\xbb\xbf" + LINE.encode(),  # a byte-order mark
    ],
    ids=["bad start", "bad byte in a string", "cut character", "byte-order mark"],
)
def test_bytes_that_are_not_utf8_read_as_text_mode_reads_them(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(LINE.encode() + b"\n" + raw + b"\n" + LINE.encode() + b"\n")
    fast, fast_messages = fast_read(path)
    plain, plain_messages = reference_read(path)
    assert fast_messages == plain_messages
    assert typed(fast) == typed(plain)


@pytest.mark.parametrize(
    "layout",
    [
        b"L\nL\n",
        b"L\r\nL\r\n",
        b"L\rL\r",  # a lone CR ends a line in text mode
        b"\n\nL\n   \n\t\nL",  # blank lines, and no line end at the end
        b"L\r\n\rX\n\r\nL\n",
        b"X\r\rL\n",
        b"L\n\xc2\xa0\nX\n",  # a line of only a no-break space: blank to str.strip
        b"L\n\x1c\nX\n",  # an ASCII separator, whitespace to str.strip but not to bytes.strip
    ],
)
def test_line_ends_and_blank_lines_give_the_same_line_numbers(tmp_path: Path, layout: bytes) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(layout.replace(b"L", LINE.encode()).replace(b"X", LINE[:40].encode()))
    fast, fast_messages = fast_read(path)
    plain, plain_messages = reference_read(path)
    assert fast_messages == plain_messages
    assert typed(fast) == typed(plain)


# --- the machinery around the rows ----------------------------------------------------------------


def _span(name: str, start: int) -> ReadSpan:
    return ReadSpan("t", f"{name}{start}", "turn", name, start, start + 1, {}, ())


def test_named_and_first_follow_children_added_after_a_lookup() -> None:
    t = TurnSpans(_span("turn", 0), [_span("tts", 2), _span("llm.call", 1)])
    assert t.first("sentence") is None and [s.start_ns for s in t.named("tts")] == [2]
    t.children.append(_span("tts", 3))
    t.children.append(_span("sentence", 4))
    assert [s.start_ns for s in t.named("tts")] == [2, 3]
    assert t.first("sentence") == _span("sentence", 4)
    found = t.named("tts")
    found.clear()  # the caller's copy: the turn's own index is untouched
    assert len(t.named("tts")) == 2


def test_nanoseconds_to_milliseconds_is_round_to_the_last_bit() -> None:
    # numbers.ms rounds whole microseconds as integers where that gives round's float; ties (ns ending
    # in 500), negative and huge spans go through round itself
    rng = random.Random(7)
    start = 1_733_000_000_123_456_789
    edges = [0, 1, 499, 500, 501, 999, 1000, 1500, 2500, -1, -500, -1500, (1 << 50) - 500, 1 << 50, (1 << 50) + 500]
    spans = edges + [rng.randrange(-(10**6), 1 << rng.choice([20, 30, 40, 50, 53])) for _ in range(200_000)]
    spans += [s - s % 1000 + rng.choice((499, 500, 501)) for s in spans[:50_000]]
    for ns in spans:
        got, want = ms(start, start + ns), round(ns / 1e6, 3)
        assert repr(got) == repr(want), ns
    assert ms(None, start) is None and ms(start, None) is None


def test_a_short_median_is_numpys_to_the_last_bit() -> None:
    rng = random.Random(12)
    pool = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-300, -1e300, 3.3333333333333335, 2.0000000000000004, 1e16, 5e-324]
    for _ in range(20_000):
        n = rng.randint(1, 33)
        values = (
            [rng.choice(pool) for _ in range(n)]
            if rng.random() < 0.5
            else [round(rng.uniform(-1e4, 1e4), rng.randint(0, 6)) for _ in range(n)]
        )
        got, want = median(values), float(np.quantile(values, 0.5))
        assert (got, math.copysign(1.0, got)) == (want, math.copysign(1.0, want)), values
    assert median((1, 2)) == 1.5 and math.isnan(median([1.0, math.nan]))


@pytest.mark.parametrize("enabled", [True, False])
def test_loading_leaves_the_garbage_collector_as_it_found_it(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        data = load_paths([DATA / "report" / "experiment"])
        assert gc.isenabled() is enabled and len(data.rows) > 0
    finally:
        (gc.enable if was else gc.disable)()
