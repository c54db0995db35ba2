"""Trace files read by several processes give the dataset one process gives.

Each case reads the same files with ``workers=1`` (everything in this process) and ``workers=2``
(two forked readers, each a share of the lines) and compares everything a report uses: rows,
per-sentence first tokens, failed stages, runs, problems (with their line numbers), notes, the
bench.csv lines and the queue places. Where a turn's spans are divided between the shares (a
parent in the other share, one span id in both), the files must be read again in one process,
and the dataset is still the same.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from pipeline.analysis import parallel, read
from pipeline.analysis.facts import PLAIN, Making
from pipeline.analysis.read import rows_from_spans
from pipeline.analysis.rows import turn_row
from pipeline.analysis.traces import ReadProblems, read_trace_file
from pipeline.analysis.turns import group_turns, servers_of
from pipeline.records.bench_csv import csv_line
from pipeline.records.turn_row import REPEATED
from pipeline.report.load import Dataset, dataset_from_spans, load_paths
from tests.paths import TEST_DATA

DATA = TEST_DATA / "report"
FOLDERS = [DATA / "experiment", DATA / "failed", DATA / "drift"]


def same(one: Dataset, two: Dataset) -> None:
    assert two.rows == one.rows
    assert two.sentence_ms == one.sentence_ms
    assert two.failed_stages == one.failed_stages
    assert two.runs == one.runs
    assert two.problems == one.problems
    assert two.notes == one.notes
    assert list(two.csv_lines()) == list(one.csv_lines())
    assert [two.queue_places(i) for i in range(len(two.rows))] == [one.queue_places(i) for i in range(len(one.rows))]


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _spans(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for rs in data["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def _line(spans: list[dict[str, Any]]) -> str:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}, separators=(",", ":"))


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_two_readers_give_what_one_gives(folder: Path) -> None:
    one, two = load_paths([folder], workers=1), load_paths([folder], workers=2)
    assert one.workers == 1 and two.workers == 2 and one.rows
    same(one, two)


def test_graphs_are_made_by_the_reader_only_when_asked_and_two_readers_make_what_one_makes() -> None:
    files = sorted((DATA / "experiment" / "traces").glob("*.jsonl"))
    one, two = read.read_traces(files, 1, graphs=True), read.read_traces(files, 2, graphs=True)
    assert two.workers == 2 and [f.graph for f in two.facts] == [f.graph for f in one.facts]
    made = [(f.row.warmup, f.row.ok, type(f.graph).__name__) for f in one.facts]
    assert {m for m in made if m[:2] == (0, 1)} == {(0, 1, "TurnGraph")} and (0, 0, "NoneType") in made
    assert all(f.graph is None for f in read.read_traces(files, 1).facts)  # the report's reading makes none


def test_more_shares_than_readers_give_what_one_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    # each reader takes several shares in turn (their answers come back while it reads the next)
    made: list[int] = []
    cut = parallel.cut

    def counted(files: list[Path], weights: list[float]) -> list[list[parallel.Piece]]:
        made.append(len(cut(files, weights)))
        return cut(files, weights)

    monkeypatch.setattr(parallel, "cut", counted)
    monkeypatch.setattr(parallel, "ROUNDS", 3)
    one, two = load_paths([DATA / "experiment"], workers=1), load_paths([DATA / "experiment"], workers=2)
    assert len(made) == 1 and made[0] > 2
    assert two.workers == 2  # processes, not shares
    same(one, two)


def test_the_rows_and_lines_are_those_of_the_spans(tmp_path: Path) -> None:
    data = load_paths([DATA / "experiment"], workers=2)
    spans = [
        s for f in sorted((DATA / "experiment" / "traces").glob("*.jsonl")) for s in read_trace_file(f, ReadProblems())
    ]
    turns = group_turns(spans, ReadProblems())
    rows = [turn_row(t)[0] for t in turns]
    assert data.rows == rows
    assert data.sentence_ms == [turn_row(t)[1] for t in turns]
    assert list(data.csv_lines()) == [csv_line(r) for r in rows]


def test_a_turn_read_again_is_the_turn_that_was_read(tmp_path: Path) -> None:
    folder = DATA / "experiment"
    data = load_paths([folder], workers=2)
    spans = [s for f in sorted((folder / "traces").glob("*.jsonl")) for s in read_trace_file(f, ReadProblems())]
    turns = group_turns(spans, ReadProblems())
    for i in (0, len(turns) // 2, len(turns) - 1):
        again = data.turn_spans(i)
        assert again is not None and again.turn == turns[i].turn and again.children == turns[i].children


def test_children_in_another_file_are_read_in_one_process(tmp_path: Path) -> None:
    # each turn span in one file, its children in another (a device's turn and its server's turn, say)
    turns, children = [], []
    for data in _lines(DATA / "experiment" / "traces" / "a1.jsonl"):
        spans = _spans(data)
        turns.append(_line([s for s in spans if s["name"] == "turn"]))
        children.append(_line([s for s in spans if s["name"] != "turn"]))
    (tmp_path / "1-turns.jsonl").write_text("\n".join(turns) + "\n", encoding="utf-8")
    (tmp_path / "2-children.jsonl").write_text("\n".join(children) + "\n", encoding="utf-8")
    one, two = load_paths([tmp_path], workers=1), load_paths([tmp_path], workers=2)
    assert two.workers == 1  # the shares were not independent: read again in one process
    same(one, two)
    assert all(r.llm_calls for r in two.rows)  # the children were found


def test_one_span_in_both_shares_is_read_in_one_process(tmp_path: Path) -> None:
    text = (DATA / "experiment" / "traces" / "b1.jsonl").read_text(encoding="utf-8")
    (tmp_path / "t.jsonl").write_text(text + text, encoding="utf-8")  # every span twice, once in each half
    one, two = load_paths([tmp_path], workers=1), load_paths([tmp_path], workers=2)
    assert two.workers == 1
    same(one, two)


def test_unreadable_lines_keep_their_line_numbers_in_the_second_share(tmp_path: Path) -> None:
    lines = (DATA / "experiment" / "traces" / "a1.jsonl").read_text(encoding="utf-8").splitlines()
    odd = [*lines[:3], "{not json", *lines[3:], "[1, 2]", "", lines[0][:50]]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(odd) + "\n", encoding="utf-8")
    one, two = load_paths([path], workers=1), load_paths([path], workers=2)
    assert two.workers == 2
    same(one, two)
    numbers = [int(p.split(":")[1]) for p in two.problems]
    assert numbers == [4, len(lines) + 2, len(lines) + 4]


def test_a_file_that_cannot_be_read_is_said_once(tmp_path: Path) -> None:
    good = DATA / "experiment" / "traces" / "a1.jsonl"
    bad = tmp_path / "b.jsonl"
    bad.mkdir()  # a folder where a file is expected: opening it fails
    files = [good, bad]
    one, two = read.read_traces(files, workers=1), read.read_traces(files, workers=2)
    assert one.problems == two.problems and len(two.problems) == 1 and str(bad) in two.problems[0]
    assert one.facts == two.facts


def test_each_round_of_shares_is_half_the_last() -> None:
    # the readers take the shares in this order: the last ones small, so the readers finish together
    assert parallel.share_weights(2)[:6] == [1, 1, 0.5, 0.5, 0.25, 0.25]
    assert len(parallel.share_weights(3)) == 3 * parallel.ROUNDS


def test_the_cut_keeps_whole_lines_in_file_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(b"x" * 9 + b"\n" + b"y" * 9 + b"\n" + b"x" * 9 + b"\n" + b"y" * 9 + b"\n")
    b.write_bytes(a.read_bytes())
    A, B = str(a), str(b)
    assert parallel.cut([a, b], [1, 1]) == [
        [parallel.Piece(A, 0, None), parallel.Piece(B, 0, 10)],
        [parallel.Piece(B, 10, None)],
    ]
    assert parallel.cut([a, b], [1, 1, 1]) == [
        [parallel.Piece(A, 0, 30)],
        [parallel.Piece(A, 30, None), parallel.Piece(B, 0, 20)],
        [parallel.Piece(B, 20, None)],
    ]
    assert parallel.cut([a, b], [2, 1, 1]) == [  # about 40, 20 and 20 of the 80 bytes, to a line end
        [parallel.Piece(A, 0, None), parallel.Piece(B, 0, 10)],
        [parallel.Piece(B, 10, 30)],
        [parallel.Piece(B, 30, None)],
    ]
    for weights in [[1.0] * n for n in range(1, 9)] + [parallel.share_weights(w) for w in (1, 2, 3)]:
        pieces = [p for s in parallel.cut([a, b], weights) for p in s]
        for path in (a, b):
            raw = path.read_bytes()
            parts = [p for p in pieces if p.path == str(path)]
            assert b"".join(raw[p.start : p.end] for p in parts) == raw
            assert all(p.start == 0 or raw[p.start - 1 : p.start] == b"\n" for p in parts)


# --- a share read a line at a time gives what grouping all its spans gives --------------------------


def reference(folder: Path) -> Dataset:
    """Every span of the folder's files grouped at once, in this process (the in-memory path)."""
    problems = ReadProblems()
    spans = [s for f in sorted(folder.glob("*.jsonl")) for s in read_trace_file(f, problems)]
    return dataset_from_spans(spans, problems, str(folder))


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _turns_apart() -> tuple[list[str], list[str]]:
    """The a1 fixture's lines cut in two: each turn span alone, and its children alone."""
    turns, children = [], []
    for data in _lines(DATA / "experiment" / "traces" / "a1.jsonl"):
        spans = _spans(data)
        turns.append(_line([s for s in spans if s["name"] == "turn"]))
        children.append(_line([s for s in spans if s["name"] != "turn"]))
    return turns, children


@pytest.mark.parametrize("layout", ["turn first", "children first", "interleaved late", "one file each"])
def test_turns_spread_over_lines_read_as_all_spans_at_once(tmp_path: Path, layout: str) -> None:
    turns, children = _turns_apart()
    if layout == "turn first":
        _write(tmp_path / "t.jsonl", [x for pair in zip(turns, children, strict=True) for x in pair])
    elif layout == "children first":
        _write(tmp_path / "t.jsonl", [x for pair in zip(children, turns, strict=True) for x in pair])
    elif layout == "interleaved late":  # each turn's children two lines after it
        _write(tmp_path / "t.jsonl", [*turns[:2], *[x for p in zip(turns[2:], children, strict=False) for x in p]])
        with (tmp_path / "t.jsonl").open("a", encoding="utf-8") as fh:
            fh.write("\n".join(children[-2:]) + "\n")
    else:
        _write(tmp_path / "1.jsonl", children)
        _write(tmp_path / "2.jsonl", turns)
    want = reference(tmp_path)
    assert want.rows and all(r.llm_calls for r in want.rows)
    for workers in (1, 2):
        same(want, load_paths([tmp_path], workers=workers))


def test_copies_of_spans_in_later_lines_count_once(tmp_path: Path) -> None:
    lines = (DATA / "experiment" / "traces" / "b1.jsonl").read_text(encoding="utf-8").splitlines()
    _write(tmp_path / "t.jsonl", [*lines, *lines[:5], lines[0]])
    want = reference(tmp_path)
    for workers in (1, 2):
        got = load_paths([tmp_path], workers=workers)
        same(want, got)
    assert len(got.rows) == sum('"name":"turn"' in line for line in lines)  # each copy once


def _joined_ends() -> tuple[list[str], list[str]]:
    """The a1 fixture's turns as a device saw them (a ``device`` span added) and as its server did (the
    same spans under new ids, the server's turn span a child of the device's, a ``downlink`` span added)."""
    devices, servers = [], []
    new_ids = (f"00ff{n:012x}" for n in itertools.count())  # no fixture id starts so
    for data in _lines(DATA / "experiment" / "traces" / "a1.jsonl"):
        spans = _spans(data)
        turn = next((s for s in spans if s["name"] == "turn"), None)
        if turn is None:
            continue  # the run's session line
        start, end = int(turn["startTimeUnixNano"]), int(turn["endTimeUnixNano"])
        device = {
            "traceId": turn["traceId"],
            "spanId": next(new_ids),
            "parentSpanId": turn["spanId"],
            "name": "device",
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(end),
            "events": [
                {"timeUnixNano": str(start + 4_000_000_000), "name": "first_audio_received"},
                {"timeUnixNano": str(start + 4_050_000_000), "name": "first_audible_played"},
            ],
        }
        ids = {s["spanId"]: next(new_ids) for s in spans}
        server = [
            {**s, "spanId": ids[s["spanId"]], "parentSpanId": ids.get(s.get("parentSpanId", ""), turn["spanId"])}
            for s in spans
        ]
        downlink = {
            "traceId": turn["traceId"],
            "spanId": next(new_ids),
            "parentSpanId": ids[turn["spanId"]],
            "name": "downlink",
            "startTimeUnixNano": str(start + 3_990_000_000),
            "endTimeUnixNano": str(end),
        }
        devices.append(_line([*spans, device]))
        servers.append(_line([*server, downlink]))
    return devices, servers


@pytest.mark.parametrize("layout", ["one file each", "each turn's two ends together"])
def test_joined_turns_kept_give_every_turns_row_as_one_process_does(
    tmp_path: Path, layout: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # python -m pipeline.analyze writes both ends' rows: the device's, split by its server's spans, and the server's
    from pipeline.analyze import main as analyze
    from pipeline.report.__main__ import main as report_main

    device_lines, server_lines = _joined_ends()
    folder = tmp_path / "t"
    folder.mkdir()
    if layout == "one file each":
        _write(folder / "1-device.jsonl", device_lines)
        _write(folder / "2-server.jsonl", server_lines)
    else:
        _write(folder / "both.jsonl", [x for pair in zip(device_lines, server_lines, strict=True) for x in pair])
    files = sorted(folder.glob("*.jsonl"))
    problems = ReadProblems()
    spans = [s for f in files for s in read_trace_file(f, problems)]
    want = rows_from_spans(spans, problems)
    assert len(want) == 2 * len(device_lines) and not problems.messages
    turns = group_turns(spans, ReadProblems())
    servers = servers_of(turns)  # device turn -> its server's turn
    assert len(servers) == len(device_lines)
    served = {t.turn.span_id for t in servers.values()}
    device_rows = [turn_row(t, servers.get(t.turn.span_id))[0] for t in turns if t.turn.span_id not in served]
    assert any(r.uplink_ms is not None for r in device_rows)  # split by their servers' spans
    for workers in (1, 2):
        both = read.read_traces(files, workers, keep_joined=True)
        assert both.rows == want and both.joined == 0 and not both.problems
        assert [f.csv_line for f in both.facts] == [csv_line(r) for r in want]
        folded = read.read_traces(files, workers)  # the report's reading: each server turn left out, joined
        assert folded.joined == len(device_lines) and folded.rows == device_rows
    assert analyze([str(folder), "--csv", str(tmp_path / "again.csv")]) == 0
    lines = (tmp_path / "again.csv").read_bytes().decode("utf-8").splitlines(keepends=True)
    assert lines[1:] == [csv_line(r) for r in want]
    assert f"{len(want)} turn(s) from {len(files)} file(s)" in capsys.readouterr().out
    # the report's rows, folded, go to a file of another name than the run's and analyze's bench.csv
    assert report_main([str(folder), "--out", str(tmp_path / "report"), "--no-plots"]) == 0
    assert not (tmp_path / "report" / "bench.csv").exists()
    lines = (tmp_path / "report" / "rows.csv").read_bytes().decode("utf-8").splitlines(keepends=True)
    assert lines[0] == (tmp_path / "again.csv").read_bytes().decode("utf-8").splitlines(keepends=True)[0]
    assert lines[1:] == [csv_line(r) for r in device_rows]


def test_analyze_names_an_unreadable_file_and_line_and_keeps_the_other_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pipeline.analyze import main as analyze

    good = DATA / "experiment" / "traces" / "a1.jsonl"
    (tmp_path / "a1.jsonl").write_bytes(good.read_bytes())
    (tmp_path / "b.jsonl").mkdir()  # a folder where a trace file is expected: it cannot be opened
    _write(tmp_path / "c.jsonl", ["{not json", "[1, 2]"])
    assert analyze([str(tmp_path), "--csv", str(tmp_path / "out.csv")]) == 0
    said = capsys.readouterr()
    warnings = [line for line in said.err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 3
    assert f"{tmp_path / 'b.jsonl'}: could not be read" in warnings[0]
    assert warnings[1].startswith(f"warning: {tmp_path / 'c.jsonl'}:1: unreadable trace line")
    assert warnings[2].startswith(f"warning: {tmp_path / 'c.jsonl'}:2: unreadable trace line")
    rows = rows_from_spans(read_trace_file(good, ReadProblems()))  # the good file's rows, read in one process
    written = (tmp_path / "out.csv").read_bytes().decode("utf-8").splitlines(keepends=True)
    assert written[1:] == [csv_line(r) for r in rows] and rows
    assert f"{len(rows)} turn(s) from 3 file(s)" in said.out


# --- a killed child costs time, not the report -----------------------------------------------------

PARENT = os.getpid()
_read_share = read.read_share


def _dying_reader(pieces: list[parallel.Piece], making: Making = PLAIN) -> parallel.ShareResult:
    if os.getpid() != PARENT:
        os._exit(3)  # as the kernel's out-of-memory killer would end it
    return _read_share(pieces, making)


def test_a_reader_killed_means_one_process_reads_it_all(monkeypatch: pytest.MonkeyPatch) -> None:
    want = load_paths([DATA / "experiment"], workers=1)
    monkeypatch.setattr(read, "read_share", _dying_reader)
    got = load_paths([DATA / "experiment"], workers=2)
    assert got.workers == 1
    same(want, got)


def test_the_readers_answers_in_files_leave_none_behind(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(parallel, "spill_root", lambda: str(tmp_path))
    want = load_paths([DATA / "experiment"], workers=1)
    got = load_paths([DATA / "experiment"], workers=2)
    assert got.workers == 2
    same(want, got)
    monkeypatch.setattr(read, "read_share", _dying_reader)
    assert load_paths([DATA / "experiment"], workers=2).workers == 1
    assert list(tmp_path.iterdir()) == []  # the answers' folder gone, a reader killed or not


def _pickled(text: str) -> bytes:
    """``text`` as pickle writes a string (protocol 4 and later): its opcode, its length, its UTF-8."""
    raw = text.encode("utf-8")
    return (b"\x8c" + len(raw).to_bytes(1, "little") if len(raw) < 256 else b"X" + len(raw).to_bytes(4, "little")) + raw


def test_a_shares_answer_carries_each_repeated_text_once() -> None:
    # read a line at a time, the answer a reader hands back must still hold a run's settings (about a
    # kilobyte) and each of the rows' repeated texts (run id, condition, question...) once, not once a turn
    path = DATA / "experiment" / "traces" / "a1.jsonl"
    answer = read.read_share([parallel.Piece(str(path), 0, None)])
    assert answer.facts == read.read_traces([path], workers=1).facts  # the rows one process gives
    sent = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
    settings = {f.run.config_json for f in answer.facts}
    assert len(answer.facts) > 1 and len(settings) == 1 and None not in settings
    assert sent.count(_pickled(str(settings.pop()))) == 1
    texts = {getattr(f.row, column) for f in answer.facts for column in REPEATED} - {""}
    assert len({f.row.question_id for f in answer.facts}) < len(answer.facts)  # (texts that do repeat)
    assert {text: sent.count(_pickled(text)) for text in texts} == dict.fromkeys(texts, 1)
