"""The path record: paths.csv, each turn's two critical paths by segment kind, one typed record a turn
(``PathRow``), with the segment kinds a path is split into (in the order a turn passes them, and what each
one is), paths.csv's one writer and its one reader.

``PathRow`` declares the file's columns once, as ``turn.TurnRow`` declares bench.csv's: the header
(``PATH_COLUMNS``) and the docs' table of them (``paths_table``) are generated from it. A turn's row is
computed from its dependency graph by ``pipeline.analysis.path.critical.path_row``; the file is written by
``python -m pipeline.whatif --paths-csv``. The report's stacked bars follow the kinds' order.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Final

import msgspec
from msgspec import Meta
from msgspec.structs import astuple

from pipeline.records.schema import COUNT, MS, TEXT, meta, read_csv, schema, table

UPLINK = "uplink"
ENDPOINTING = "endpointing"
ASR = "asr"
QUEUE = "queue"
LLM_FIRST_TOKEN = "llm_first_token"
LLM_GENERATION = "llm_generation"
TOOL = "tool"
TTS_FIRST_FRAME = "tts_first_frame"
TTS = "tts"
DOWNLINK = "downlink"
DEVICE_BUFFER = "device_buffer"
PLAYBACK = "playback"
HANDOFF = "handoff"

# each kind, in path order, with what its time is (a path's columns say it in the docs' table)
MEANINGS = {
    UPLINK: "a device's turn: its microphone captured the end of speech -> the server had that frame",
    ENDPOINTING: "end of speech -> the VAD's end-point",
    ASR: "the end-point reaches the ASR -> the transcript",
    QUEUE: "a call waiting for the shared model's scheduler",
    LLM_FIRST_TOKEN: "a call's request -> its first token (a remote LLM: the network too)",
    LLM_GENERATION: "first token -> a sentence's cut (or the next cut, or the call's end)",
    TOOL: "a tool's round trip between two calls",
    TTS_FIRST_FRAME: "a sentence reaches the synthesiser -> its first audio frame",
    TTS: "first frame -> the synthesiser done with the sentence (a later sentence may wait on it)",
    DOWNLINK: "a device's turn: the server sent a frame -> the device had it",
    DEVICE_BUFFER: "first frame -> it plays (in one process: handed to the player)",
    PLAYBACK: "a sentence's audio playing (the next may wait for the speaker)",
    HANDOFF: "one stage's output -> the next stage taking it up (queues, the event loop)",
}
SEGMENTS = tuple(MEANINGS)
WORK = frozenset(SEGMENTS) - {HANDOFF}  # kinds that are work of their own (slack counts them)

SILENCE, WHOLE = "silence", "whole"
# each path's target, and the path as the columns' meanings name it
TARGETS = {SILENCE: "end of speech -> first audible sample", WHOLE: "end of speech -> last sample played"}
_PATHS = {SILENCE: "the silence's path", WHOLE: "the whole turn's path"}


def _total(target: str) -> Meta:
    return meta(MS, f"{TARGETS[target]}: {_PATHS[target]}, whose segments below sum to it", target)


def _on(target: str, kind: str) -> Meta:
    return meta(MS, f"{_PATHS[target]}: its time in `{kind}` ({MEANINGS[kind]})", target)


def _slack(target: str) -> Meta:
    return meta(MS, f"work off {_PATHS[target]} that ran before its end: beside the path, it delayed nobody", target)


class PathRow(msgspec.Struct, frozen=True, gc=False):
    """One turn's two critical paths (``pipeline.analysis.path.critical.critical_path``): the silence (to
    the first audible sample) and the whole turn (to the last sample played), each by segment kind in path
    order, and the slack beside each. Each path's segments sum exactly to its total."""

    run_id: Annotated[str, meta(TEXT, "the run the turn belongs to")] = ""
    condition: Annotated[str, meta(TEXT, "the run's condition")] = ""
    question_id: Annotated[str, meta(TEXT, "the question asked")] = ""
    round: Annotated[int, meta(COUNT, "the round, from 1")] = 0
    device: Annotated[int, meta(COUNT, "the device's index in a many-device run (0 otherwise)")] = 0
    silence_ms: Annotated[float, _total(SILENCE)] = 0.0
    silence_uplink_ms: Annotated[float, _on(SILENCE, UPLINK)] = 0.0
    silence_endpointing_ms: Annotated[float, _on(SILENCE, ENDPOINTING)] = 0.0
    silence_asr_ms: Annotated[float, _on(SILENCE, ASR)] = 0.0
    silence_queue_ms: Annotated[float, _on(SILENCE, QUEUE)] = 0.0
    silence_llm_first_token_ms: Annotated[float, _on(SILENCE, LLM_FIRST_TOKEN)] = 0.0
    silence_llm_generation_ms: Annotated[float, _on(SILENCE, LLM_GENERATION)] = 0.0
    silence_tool_ms: Annotated[float, _on(SILENCE, TOOL)] = 0.0
    silence_tts_first_frame_ms: Annotated[float, _on(SILENCE, TTS_FIRST_FRAME)] = 0.0
    silence_tts_ms: Annotated[float, _on(SILENCE, TTS)] = 0.0
    silence_downlink_ms: Annotated[float, _on(SILENCE, DOWNLINK)] = 0.0
    silence_device_buffer_ms: Annotated[float, _on(SILENCE, DEVICE_BUFFER)] = 0.0
    silence_playback_ms: Annotated[float, _on(SILENCE, PLAYBACK)] = 0.0
    silence_handoff_ms: Annotated[float, _on(SILENCE, HANDOFF)] = 0.0
    silence_slack_ms: Annotated[float, _slack(SILENCE)] = 0.0
    whole_ms: Annotated[float, _total(WHOLE)] = 0.0
    whole_uplink_ms: Annotated[float, _on(WHOLE, UPLINK)] = 0.0
    whole_endpointing_ms: Annotated[float, _on(WHOLE, ENDPOINTING)] = 0.0
    whole_asr_ms: Annotated[float, _on(WHOLE, ASR)] = 0.0
    whole_queue_ms: Annotated[float, _on(WHOLE, QUEUE)] = 0.0
    whole_llm_first_token_ms: Annotated[float, _on(WHOLE, LLM_FIRST_TOKEN)] = 0.0
    whole_llm_generation_ms: Annotated[float, _on(WHOLE, LLM_GENERATION)] = 0.0
    whole_tool_ms: Annotated[float, _on(WHOLE, TOOL)] = 0.0
    whole_tts_first_frame_ms: Annotated[float, _on(WHOLE, TTS_FIRST_FRAME)] = 0.0
    whole_tts_ms: Annotated[float, _on(WHOLE, TTS)] = 0.0
    whole_downlink_ms: Annotated[float, _on(WHOLE, DOWNLINK)] = 0.0
    whole_device_buffer_ms: Annotated[float, _on(WHOLE, DEVICE_BUFFER)] = 0.0
    whole_playback_ms: Annotated[float, _on(WHOLE, PLAYBACK)] = 0.0
    whole_handoff_ms: Annotated[float, _on(WHOLE, HANDOFF)] = 0.0
    whole_slack_ms: Annotated[float, _slack(WHOLE)] = 0.0


PATHS_SCHEMA: Final = schema(PathRow)
PATH_COLUMNS: Final = tuple(c.name for c in PATHS_SCHEMA)  # paths.csv's header


def paths_csv(rows: Iterable[PathRow]) -> str:
    """paths.csv's text: the header, then each row (ms to the microsecond, as bench.csv writes them)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(PATH_COLUMNS)
    for row in rows:
        writer.writerow([round(v, 3) if isinstance(v, float) else v for v in astuple(row)])
    return buffer.getvalue()


def read_paths(path: Path) -> list[PathRow]:
    """The rows of a paths.csv (``schema.RecordFileError`` for a file this version did not write)."""
    return [row for _, row in read_csv(path, PathRow, PATHS_SCHEMA)]


def paths_table() -> str:
    """The docs' table of paths.csv's columns."""
    return table(PATHS_SCHEMA)
