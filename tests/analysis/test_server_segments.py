"""A real server's segments of first sound, from the device's spans and the lab's services' spans."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

from msgspec.structs import replace

from pipeline.analysis.server_segments import read_segments, segment_rows, summarize
from pipeline.analysis.traces import ReadEvent, ReadProblems, ReadSpan
from pipeline.analysis.turns import TurnSpans, group_turns
from pipeline.records.segment import (
    MEASURED,
    SEGMENT_COLUMNS,
    SEGMENTS,
    SegmentRow,
    read_segments_csv,
    write_segments,
)
from pipeline.tracing import names
from pipeline.tracing.otlp_json import key_values

MS = 1_000_000
T0 = 1_700_000_000_000 * MS  # an epoch in ns, so times look like a real trace's


def span(
    name: str,
    start_ms: float,
    end_ms: float,
    events: dict[str, float] | None = None,
    span_id: str = "",
    parent: str = "",
    status: int = 0,
    attributes: dict[str, str | int | bool] | None = None,
) -> ReadSpan:
    """A span; an event name may carry ``#n`` to repeat it (the relay's ``chunk``)."""
    evs = tuple(ReadEvent(k.split("#")[0], T0 + int(v * MS)) for k, v in (events or {}).items())
    start, end = T0 + int(start_ms * MS), T0 + int(end_ms * MS)
    return ReadSpan("t", span_id or f"{name}-{start_ms}", parent, name, start, end, dict(attributes or {}), evs, status)


def device_turn(start: float, end: float, qid: str, round_: int, warmup: bool, ok: bool = True) -> list[ReadSpan]:
    """A turn whose user stops speaking at start + 2000 and hears the answer at start + 5000."""
    turn = span(
        names.TURN, start, end, {names.EV_USER_SPEECH_END: start + 2000}, span_id=f"turn{start}",
        attributes={
            names.SCHEMA: names.SCHEMA_VERSION, names.QUESTION_ID: qid, names.ROUND: round_, names.WARMUP: warmup,
            names.OK: ok,
        },
    )  # fmt: skip
    device = span(
        names.DEVICE, start, end,
        {names.EV_FIRST_AUDIO_RECEIVED: start + 4990, names.EV_FIRST_AUDIBLE: start + 5000},
        span_id=f"dev{start}", parent=f"turn{start}",
    )  # fmt: skip
    return [turn, device]


def turns(spans: Sequence[ReadSpan]) -> list[TurnSpans]:
    problems = ReadProblems()
    found = group_turns(spans, problems)
    assert not problems.messages
    return found


def services(start: float) -> list[ReadSpan]:
    """What the lab's services saw of that turn: ASR 2300-3300, LLM 3350-(3600 first token, chunks), TTS 3800-3900."""
    return [
        span(names.ASR, start + 2300, start + 3300),
        span(
            names.LLM_CALL,
            start + 3350,
            start + 4500,
            {
                names.EV_FIRST_CHUNK: start + 3550,
                names.EV_FIRST_TOKEN: start + 3600,
                "chunk#1": start + 3650,
                "chunk#2": start + 3700,
                "chunk#3": start + 3850,
            },
        ),
        span(names.TTS, start + 3800, start + 3900),
        span(names.TTS, start + 4000, start + 4050),  # the second sentence: not on first sound's path
    ]


def test_a_turn_splits_into_consecutive_parts_that_sum_to_first_audible() -> None:
    rows = segment_rows(turns(device_turn(0, 9000, "q1", 2, False)), services(0))
    assert len(rows) == 1
    row = rows[0]
    assert row.first_audible_ms == 3000.0
    assert row.to_asr_ms == 300.0
    assert row.asr_ms == 1000.0
    assert row.asr_to_llm_ms == 50.0
    assert row.llm_first_token_ms == 250.0
    assert row.llm_to_sentence_ms == 100.0  # the last chunk before the TTS request came at 3700
    assert row.sentence_to_tts_ms == 100.0
    assert row.tts_ms == 100.0
    assert row.tts_to_audio_ms == 1090.0
    assert row.device_buffer_ms == 10.0
    parts = ("to_asr_ms", "asr_ms", "asr_to_llm_ms", "llm_first_token_ms", "llm_to_sentence_ms")
    rest = ("sentence_to_tts_ms", "tts_ms", "tts_to_audio_ms", "device_buffer_ms")
    assert sum(getattr(row, k) for k in (*parts, *rest)) == row.first_audible_ms
    # what is left once ASR, LLM first token and generation, TTS and the buffer are taken out
    assert row.server_own_ms == 3000.0 - 1000 - 250 - 100 - 100 - 10


def test_service_spans_go_to_the_turn_that_holds_them_and_failed_ones_are_passed_over() -> None:
    device = device_turn(0, 9000, "q1", 1, True) + device_turn(10_000, 19_000, "q2", 1, True)
    failed_asr = span(names.ASR, 10_100, 10_200, status=names.STATUS_ERROR)
    rows = segment_rows(turns(device), [*services(0), failed_asr, *services(10_000)])
    assert [r.question_id for r in rows] == ["q1", "q2"]
    assert rows[1].asr_ms == 1000.0 and rows[1].to_asr_ms == 300.0


def test_a_turn_without_the_services_spans_has_no_segments_but_keeps_first_audible() -> None:
    (row,) = segment_rows(turns(device_turn(0, 9000, "q1", 1, False)), [])
    assert row.first_audible_ms == 3000.0
    assert row.asr_ms is None and row.llm_first_token_ms is None and row.server_own_ms is None
    assert row.device_buffer_ms == 10.0


def test_the_summary_leaves_out_warm_up_and_failed_turns() -> None:
    device = (
        device_turn(0, 9000, "q1", 1, True)
        + device_turn(10_000, 19_000, "q1", 2, False)
        + device_turn(20_000, 29_000, "q2", 2, False, ok=False)
    )
    rows = segment_rows(turns(device), [*services(0), *services(10_000), *services(20_000)])
    summary = summarize(rows)
    assert (summary.turns, summary.ok) == (2, 1)
    assert summary.first_audible_median == 3000.0 and summary.first_audible_p90 == 3000.0
    assert summary.medians["asr_ms"] == 1000.0
    assert summary.medians["server_own_ms"] == 1540.0


def test_a_server_that_cuts_the_utterance_early_has_a_negative_to_asr_and_the_prompt_state_is_kept() -> None:
    llm = span(
        names.LLM_CALL, 3350, 4500, {names.EV_FIRST_TOKEN: 3600},
        attributes={names.GEN_AI_INPUT_TOKENS: 3100, names.PROMPT_CACHED_TOKENS: 1200},
    )  # fmt: skip
    early = [span(names.ASR, 1500, 3300), llm, span(names.TTS, 3800, 3900)]
    (row,) = segment_rows(turns(device_turn(0, 9000, "q1", 2, False)), early)
    assert row.to_asr_ms == -500.0  # the server's VAD cut half a second before the user stopped
    assert row.asr_ms == 1800.0
    assert (row.prompt_tokens, row.prompt_cached_tokens) == (3100, 1200)


def _line(spans: Sequence[ReadSpan]) -> str:
    """The spans as one OTLP JSON trace line, as a trace file holds them."""
    encoded = [
        {
            "traceId": s.trace_id,
            "spanId": s.span_id,
            "parentSpanId": s.parent_span_id,
            "name": s.name,
            "startTimeUnixNano": str(s.start_ns),
            "endTimeUnixNano": str(s.end_ns),
            "attributes": key_values(s.attributes.items()),
            "events": [{"timeUnixNano": str(e.time_ns), "name": e.name} for e in s.events],
            "status": {"code": s.status_code},
        }
        for s in spans
    ]
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": encoded}]}]}) + "\n"


def test_trace_files_are_read_through_the_one_reader_and_give_the_rows_of_the_spans(tmp_path: Path) -> None:
    first, second = device_turn(0, 9000, "q1", 1, True), device_turn(10_000, 19_000, "q1", 2, False)
    older = device_turn(20_000, 29_000, "q2", 2, False)
    older[0] = replace(older[0], attributes={**older[0].attributes, names.SCHEMA: "0"})
    (tmp_path / "device.jsonl").write_text(_line(second) + _line(first) + _line(older) + "{cut\n")
    (tmp_path / "services.jsonl").write_text("".join(_line([s]) for s in [*services(0), *services(10_000)]))
    read = read_segments([tmp_path / "device.jsonl"], [tmp_path / "services.jsonl"])
    assert read.rows == segment_rows(turns([*first, *second]), [*services(0), *services(10_000)])
    assert [r.round for r in read.rows] == [1, 2]  # in time order, as the files' lines were not
    # the turn of another trace schema is skipped and said, as every reader says it
    assert [p.split(": ", 1)[1] for p in read.problems] == [
        "unreadable trace line (JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 "
        "(char 1))",
        "trace schema version '0' is not '1'; skipped",
    ]


def test_the_rows_columns_come_from_their_declaration_and_segments_csv_writes_them(tmp_path: Path) -> None:
    assert SegmentRow.__struct_fields__ == SEGMENT_COLUMNS
    assert SEGMENTS == (
        "to_asr_ms",
        "asr_ms",
        "asr_to_llm_ms",
        "llm_first_token_ms",
        "llm_to_sentence_ms",
        "sentence_to_tts_ms",
        "tts_ms",
        "tts_to_audio_ms",
        "device_buffer_ms",
    )
    assert MEASURED == ("asr_ms", "llm_first_token_ms", "llm_to_sentence_ms", "tts_ms", "device_buffer_ms")
    rows = segment_rows(turns(device_turn(0, 9000, "q1", 2, False)), [])
    write_segments(tmp_path / "segments.csv", [("real server, A", rows)])
    with (tmp_path / "segments.csv").open(newline="", encoding="utf-8") as fh:
        header, line = list(csv.reader(fh))
    assert header == ["run", *SEGMENT_COLUMNS]
    assert dict(zip(header, line, strict=True)) == {
        **dict.fromkeys(header, ""),
        "run": "real server, A",
        "question_id": "q1",
        "round": "2",
        "warmup": "False",
        "ok": "True",
        "first_audible_ms": "3000.0",
        "device_buffer_ms": "10.0",
    }
    assert read_segments_csv(tmp_path / "segments.csv") == [("real server, A", row) for row in rows]
