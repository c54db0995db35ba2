"""paths.csv: each turn's two critical paths by segment kind, one typed record a turn (``PathRow``).

``PathRow`` declares the file's columns once, as ``columns.TurnRow`` declares bench.csv's: the
header (``PATH_COLUMNS``) and the README's table of them (``paths_table``) are generated from it.
Written by ``python -m pipeline.whatif --paths-csv``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Annotated, Final

import msgspec
from msgspec import Meta
from msgspec.structs import astuple

from pipeline.analysis.path.critical import critical_path
from pipeline.analysis.path.graph import TurnGraph
from pipeline.analysis.path.kinds import (
    ASR,
    DEVICE_BUFFER,
    DOWNLINK,
    ENDPOINTING,
    HANDOFF,
    LLM_FIRST_TOKEN,
    LLM_GENERATION,
    MEANINGS,
    PLAYBACK,
    QUEUE,
    TOOL,
    TTS,
    TTS_FIRST_FRAME,
    UPLINK,
)
from pipeline.analysis.schema import COUNT, MS, TEXT, meta, schema, table

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
    """One turn's two critical paths (``critical.critical_path``): the silence (to the first audible
    sample) and the whole turn (to the last sample played), each by segment kind in path order, and the
    slack beside each. Each path's segments sum exactly to its total."""

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


def path_row(graph: TurnGraph) -> PathRow:
    """One turn's two critical paths by segment (ms), each summing exactly to its total, and the slack beside
    each."""
    values: dict[str, float] = {}
    for target, point in ((SILENCE, graph.first_audible), (WHOLE, graph.last_played)):
        path = critical_path(graph, point)
        values[f"{target}_ms"] = path.total_ns / 1e6
        for kind, ns in path.by_kind().items():
            values[f"{target}_{kind}_ms"] = ns / 1e6
        values[f"{target}_slack_ms"] = sum(path.slack_ns.values()) / 1e6
    return PathRow(graph.run_id, graph.condition, graph.question_id, graph.round, graph.device, **values)


def paths_csv(graphs: Iterable[TurnGraph]) -> str:
    """Every turn's ``path_row`` as CSV text (ms to the microsecond, as bench.csv writes them)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(PATH_COLUMNS)
    for graph in graphs:
        writer.writerow([round(v, 3) if isinstance(v, float) else v for v in astuple(path_row(graph))])
    return buffer.getvalue()


def paths_table() -> str:
    """The README's table of paths.csv's columns."""
    return table(PATHS_SCHEMA)
