"""The segment record: segments.csv, a device turn's first sound split into consecutive parts, one typed record a
turn (``SegmentRow``), with segments.csv's one writer and its one reader.

``SegmentRow`` declares the file's columns once, as ``turn.TurnRow`` declares bench.csv's: the header
(``SEGMENT_COLUMNS``, after the run's label), the summary's columns and the docs' table of them
(``segments_table``) are generated from it. The rows are computed from spans by
``pipeline.analysis.server_segments``; the interop runs write them (``pipeline.interop.side_by_side``).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Final

import msgspec
from msgspec.structs import astuple

from pipeline.records.schema import COUNT, MS, TEXT, TOKENS, meta, read_csv, schema, table

# column groups: the consecutive parts of first sound, measured spans or the time between them; the prompt
MEASURED_PART, BETWEEN, PROMPT_STATE = "measured", "between", "prompt"
RUN = "run"  # segments.csv's first column, before the record's: the run's label


class SegmentRow(msgspec.Struct, frozen=True, gc=False):
    """One device turn's first sound split into consecutive parts (``*_ms`` in order: they sum to
    ``first_audible_ms``), from the device's spans and the lab's services' spans on one clock. Empty
    where a part's spans are missing."""

    question_id: Annotated[str, meta(TEXT, "the question asked")] = ""
    round: Annotated[int | None, meta(COUNT, "the round, from 1")] = None
    warmup: Annotated[bool, meta(TEXT, "the warm-up round, left out of the summary (M6)")] = False
    ok: Annotated[bool, meta(TEXT, "the turn succeeded")] = False
    first_audible_ms: Annotated[
        float | None,
        meta(MS, "the device's end of user speech -> the answer's first sample above the audibility threshold played"),
    ] = None
    to_asr_ms: Annotated[
        float | None,
        meta(
            MS,
            "end of user speech -> the ASR request reached the speech service: uplink, the server's end-pointing "
            "and hand-off "
            "(negative: the server cut the utterance before the user stopped)",
            BETWEEN,
        ),
    ] = None
    asr_ms: Annotated[float | None, meta(MS, "the ASR request, as the service timed it", MEASURED_PART)] = None
    asr_to_llm_ms: Annotated[
        float | None,
        meta(
            MS,
            "the ASR request's end -> the LLM request reached the relay (the server's own: prompt, history)",
            BETWEEN,
        ),
    ] = None
    llm_first_token_ms: Annotated[
        float | None, meta(MS, "the LLM's first token, as the relay saw it arrive", MEASURED_PART)
    ] = None
    llm_to_sentence_ms: Annotated[
        float | None,
        meta(
            MS,
            "the first token -> the last chunk the LLM streamed before the first TTS request: generation until "
            "the first sentence the server chose to speak existed",
            MEASURED_PART,
        ),
    ] = None
    sentence_to_tts_ms: Annotated[
        float | None, meta(MS, "that chunk -> the first TTS request reached the service (the server's own)", BETWEEN)
    ] = None
    tts_ms: Annotated[float | None, meta(MS, "that TTS request, as the service timed it", MEASURED_PART)] = None
    tts_to_audio_ms: Annotated[
        float | None,
        meta(
            MS,
            "that TTS request's end -> the device received the first audio (the server's decode, Opus encode "
            "and pacing, and the downlink)",
            BETWEEN,
        ),
    ] = None
    device_buffer_ms: Annotated[
        float | None, meta(MS, "the device received the first audio -> it began to play", MEASURED_PART)
    ] = None
    server_own_ms: Annotated[
        float | None,
        meta(
            MS,
            "derived: first audible less the measured parts (ASR, LLM first token and generation to the first "
            "sentence, TTS, the device's buffer): the server's own work, uplink, end-pointing and downlink",
        ),
    ] = None
    prompt_tokens: Annotated[
        int | None, meta(TOKENS, "the LLM's prompt, as the LLM server counted it (through the relay)", PROMPT_STATE)
    ] = None
    prompt_cached_tokens: Annotated[
        int | None, meta(TOKENS, "how much of the prompt the LLM server took from its cache", PROMPT_STATE)
    ] = None


SEGMENT_SCHEMA: Final = schema(SegmentRow)
SEGMENT_COLUMNS: Final = tuple(c.name for c in SEGMENT_SCHEMA)  # segments.csv's, after its run label
SEGMENTS: Final = tuple(c.name for c in SEGMENT_SCHEMA if c.group in (MEASURED_PART, BETWEEN))  # in order
MEASURED: Final = tuple(c.name for c in SEGMENT_SCHEMA if c.group == MEASURED_PART)
# the state the LLM's first token depends on, as the upstream counted it (through the relay)
PROMPT: Final = tuple(c.name for c in SEGMENT_SCHEMA if c.group == PROMPT_STATE)
SUMMARIZED: Final = (*SEGMENTS, "server_own_ms", *PROMPT)  # the summary's medians


def segment_cells(row: SegmentRow) -> list[object]:
    """The row as segments.csv writes it, in ``SEGMENT_COLUMNS`` order (an empty part: an empty cell)."""
    return ["" if v is None else v for v in astuple(row)]


def write_segments(path: Path, rows_by_run: Sequence[tuple[str, Sequence[SegmentRow]]]) -> None:
    """segments.csv: every run's rows, each after its run's label (``SEGMENT_COLUMNS``)."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow([RUN, *SEGMENT_COLUMNS])
        for label, rows in rows_by_run:
            writer.writerows([label, *segment_cells(row)] for row in rows)


def read_segments_csv(path: Path) -> list[tuple[str, SegmentRow]]:
    """The rows of a segments.csv, each with its run's label (``schema.RecordFileError`` for a file this version
    did not write)."""
    return [(label, row) for (label,), row in read_csv(path, SegmentRow, SEGMENT_SCHEMA, before=(RUN,))]


def segments_table() -> str:
    """The docs' table of segments.csv's columns."""
    return table(SEGMENT_SCHEMA)
