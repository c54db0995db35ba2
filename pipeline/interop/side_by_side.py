"""The interop runs side by side: one row per server and path, the segments of first sound in columns.

Every figure is a median over the measured turns that succeeded (the warm-up round left out),
computed from spans by ``analysis.server_segments``; ``server own`` is derived from them (what is
left of first audible once the measured segments are taken out) and labelled so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.analysis.server_segments import SegmentSummary
from pipeline.records.bench_csv import read_bench_csv

HEADERS = (
    ("to_asr_ms", "to ASR"),
    ("asr_ms", "ASR"),
    ("asr_to_llm_ms", "ASR->LLM"),
    ("llm_first_token_ms", "LLM 1st token"),
    ("llm_to_sentence_ms", "LLM to 1st sentence"),
    ("sentence_to_tts_ms", "sentence->TTS"),
    ("tts_ms", "TTS"),
    ("tts_to_audio_ms", "TTS->device"),
    ("device_buffer_ms", "device buffer"),
    ("server_own_ms", "server own (derived)"),
)


@dataclass(frozen=True, slots=True)
class RunResult:
    """One interop run (a server and a path) as the table shows it."""

    label: str  # "real server, A", ...
    condition: str
    summary: SegmentSummary
    packets_lost: int | None  # over the measured turns; None when the path has no packet counts (WebSocket)
    packets_late: int | None
    note: str = ""  # what went wrong, when something did


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def markdown(results: Sequence[RunResult]) -> str:
    """interop.md's table: a row per run, the medians of first sound's parts in columns."""
    head = ["run", "turns ok", "first audible median", "P90", *(h for _, h in HEADERS)]
    head += ["prompt tokens / cached", "packets lost / late"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        s = r.summary
        packets = "-" if r.packets_lost is None else f"{r.packets_lost} / {r.packets_late}"
        cells = [
            r.label,
            f"{s.ok}/{s.turns}",
            _cell(s.first_audible_median),
            _cell(s.first_audible_p90),
            *(_cell(s.medians.get(key)) for key, _ in HEADERS),
            f"{_cell(s.medians.get('prompt_tokens'))} / {_cell(s.medians.get('prompt_cached_tokens'))}",
            packets,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {r.label}: {r.note}" for r in results if r.note]
    return "\n".join([*lines, *(["", *notes] if notes else [])]) + "\n"


def interop_intro(fixtures: str, limit: int, rounds: int) -> str:
    """interop.md's heading and first paragraph: what was asked and how the table's figures were measured."""
    return (
        "# A real xiaozhi server beside the lab's\n\n"
        f"Fixtures {fixtures}, the first {limit} question(s), {rounds} round(s) (the first a "
        "warm-up, left out). Medians in ms over the measured turns that succeeded, from spans: the device's and "
        "the lab's speech services' and LLM relay's, on one clock. `server own (derived)` is first audible less "
        "ASR, LLM first token, LLM to first sentence, TTS and the device buffer: it holds uplink, end-pointing "
        "and downlink (loopback) besides the server's own work. Prompt tokens and how many the LLM server took "
        "from its cache are as the LLM server counted them (llama.cpp's timings), the state the first token "
        "depends on. A: the emulated cloud (estimated compute "
        "profile fast-70b-api); B: llama.cpp's server with the local model.\n\n"
    )


def packets(bench: Path) -> tuple[int | None, int | None]:
    """Packets lost and late over a run's measured turns; None where no turn counted packets (WebSocket)."""
    if not bench.is_file():
        return None, None
    rows = [r for r in read_bench_csv(bench) if not r.warmup]
    lost = [r.packets_lost for r in rows if r.packets_lost is not None]
    if not lost:
        return None, None
    return sum(lost), sum(r.packets_late or 0 for r in rows if r.packets_lost is not None)
