"""A recording of the room read against the traces: where a question's clip was said, where its answer was
first heard, and what the traces say of the same interval.

Shared by ``tests/acoustic/test_sound_e2e.py`` (the emulator heard through a sound server agrees with its traces) and
``scripts/bench_sound.py`` (the same, measured over more turns); here rather than in either, as a script may
import nothing of the tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.acoustic.recording import AUDIBLE
from pipeline.acoustic.sound import Pcm
from pipeline.analysis.read import read_traces
from pipeline.analysis.traces import ReadProblems, ReadSpan, read_trace_file, trace_files
from pipeline.events import FRAME_MS
from pipeline.records.acoustic import AcousticRow
from pipeline.records.turn_row import TurnRow
from pipeline.report.acoustic_match import match
from pipeline.settings.audio import load_audio
from pipeline.tracing import names


def clip_pcm(question_audio: Path) -> Pcm:
    """The clip as the device sends it (16 kHz mono 16-bit frames), as float."""
    frames = load_audio(question_audio).frames
    return np.frombuffer(b"".join(f.pcm for f in frames), "<i2").astype(np.float32) / 32768.0


def find(recording: Pcm, clip: Pcm) -> int:
    """Where ``clip`` starts in ``recording`` (cross-correlation, by FFT)."""
    n = 1 << int(np.ceil(np.log2(len(recording) + len(clip))))
    corr = np.fft.irfft(np.fft.rfft(recording, n) * np.conj(np.fft.rfft(clip, n)), n)
    return int(np.argmax(corr[: len(recording) - len(clip) + 1]))


def answer_onset(recording: Pcm, clip: Pcm, at: int) -> int | None:
    """The first sample after ``at`` above the audible threshold once the clip said there is taken out."""
    rest = recording[at:].copy()
    rest[: len(clip)] -= clip[: len(rest)]
    loud = np.flatnonzero(np.abs(rest) > AUDIBLE)
    return at + int(loud[0]) if len(loud) else None


def traced(out: Path) -> dict[str, tuple[float, float]]:
    """Per question: the trace's first-frame capture start -> first audible, and its silence from the VAD's end of
    speech (``user_speech_end``: the traces' ``first_audible_ms``), in ms."""
    spans: list[ReadSpan] = [s for f in trace_files(out / "traces") for s in read_trace_file(f, ReadProblems())]
    by_id = {s.span_id: s for s in spans}
    found = {}
    for device in (s for s in spans if s.name == names.DEVICE):
        turn = by_id[device.parent_span_id]
        audible = next(e.time_ns for e in device.events if e.name == names.EV_FIRST_AUDIBLE)
        spoken = next(e.time_ns for e in turn.events if e.name == names.EV_USER_SPEECH_END)
        captured = device.start_ns - FRAME_MS * 1_000_000
        found[str(turn.attributes[names.QUESTION_ID])] = ((audible - captured) / 1e6, (audible - spoken) / 1e6)
    return found


def trace_turns(out: Path) -> list[TurnRow]:
    """The turns of a replay's traces (``out/traces``), read as the report reads them."""
    return list(read_traces(trace_files(out / "traces"), workers=1).rows)


def acoustic_minus_trace(turns: Sequence[TurnRow], rows: Sequence[AcousticRow]) -> dict[str, list[float]]:
    """Per trace column compared (``Match.compared``), in the rows' order: each turn's silence from the recording
    minus the traces' from the same end of speech (ms). A row the report would not compare (unmatched, not
    measured, or a trace without that column) is left out."""
    found: dict[str, list[float]] = {}
    for m in match(turns, rows)[0]:
        if (difference := m.difference_ms) is not None:
            found.setdefault(m.compared, []).append(-difference)  # the report's is trace - recording
    return found
