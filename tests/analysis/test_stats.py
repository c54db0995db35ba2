import json
from pathlib import Path

import pytest

from pipeline.analysis.numbers import quantile
from pipeline.analysis.read import rows_from_spans
from pipeline.analysis.stats import success_rate, summarize
from pipeline.analysis.traces import ReadProblems, read_trace_file
from pipeline.records.turn_row import TurnRow
from pipeline.tracing import names
from pipeline.tracing.export import Tracing
from stages.llm.scripted import ScriptedReply
from tests.scenario import run_virtual, stages


def test_quantile_interpolates_linearly() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert quantile(values, 0.5) == 3.0
    assert quantile(values, 0.9) == pytest.approx(7.6, abs=1e-12)
    assert quantile([5.0], 0.9) == 5.0


def test_summary_excludes_warmup_and_failed_turns_and_says_so() -> None:
    rows = [
        TurnRow(warmup=1, ok=1, whole_turn_ms=1000.0),
        TurnRow(warmup=0, ok=1, whole_turn_ms=10.0),
        TurnRow(warmup=0, ok=1, whole_turn_ms=20.0),
        TurnRow(warmup=0, ok=0, whole_turn_ms=None),
    ]
    s = summarize(rows, "whole_turn_ms")
    assert (s.n, s.turns, s.median, s.minimum, s.maximum, s.partial) == (2, 3, 15.0, 10.0, 20.0, True)
    assert success_rate(rows) == (2, 3)


def test_truncated_lines_and_foreign_schemas_are_reported_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tracing = Tracing(path, "test")
    tl = run_virtual(stages(ScriptedReply("Hi.")))
    tracing.emit_turn(tl, {names.SCHEMA: names.SCHEMA_VERSION, names.QUESTION_ID: "good"})
    tracing.emit_turn(tl, {names.SCHEMA: "0", names.QUESTION_ID: "old"})
    tracing.shutdown()
    lines = path.read_text().splitlines()
    path.write_text(
        lines[0] + "\n" + lines[1] + "\n" + lines[0][: len(lines[0]) // 2] + "\n" + json.dumps({"x": 1}) + "\n"
    )
    problems = ReadProblems()
    rows = rows_from_spans(read_trace_file(path, problems), problems)
    assert [r.question_id for r in rows] == ["good"]
    assert len(problems.messages) == 2
    assert problems.messages[0].startswith(f"{path}:3: unreadable trace line")
    assert "trace schema version '0' is not '1'; skipped" in problems.messages[1]


def test_the_summarys_columns_stay_apart_at_fleet_scale() -> None:
    # a fleet's "n" (33331/33331) ran into the max before it: "5427.033331/33331"
    from pipeline.analysis.summary import summary_table

    rows = [TurnRow(run_id="r", ok=1, warmup=int(i == 0), whole_turn_ms=5427.0 - (i % 2)) for i in range(33_332)]
    line = next(x for x in summary_table(rows).splitlines() if x.split()[:1] == ["whole_turn_ms"])
    assert line.split() == ["whole_turn_ms", "5426.0", "5427.0", "5426.0", "5427.0", "33331/33331"]
