"""Where the traces put each turn in an emulated device's recording, and what the recording holds there.

For checking only (issue 33, part 3): ``--record-audio`` writes a device's stereo WAV on the traces'
clock with a sidecar naming the clock reading of its sample 0 (``t0_ns``). Each of the device's turns
then has three sample positions from its spans: the end of speech (``user_speech_end``, where the
microphone captured it: left channel), the first audible sample and the end of the last one
(``first_audible_played``, ``last_audible_played``: right channel). ``check_recording`` reads the
recording and finds, on the right channel, the first and last sample above the audibility threshold
after each turn's end of speech, so a test or a bench can say by how many samples the two agree. The
acoustic measurement (``pipeline/acoustic``) finds its own marks from the sound alone and never reads
any of this.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile

from pipeline.analysis.traces import AttrValue, ReadProblems, ReadSpan
from pipeline.analysis.turns import TurnSpans, group_turns
from pipeline.tracing import names

THRESHOLD = 64  # |x| of 16-bit above this is audible: the emulator's (``opus.audible``) threshold
SAMPLE_RATE = 16000  # what the emulator records at; a sidecar saying otherwise is refused


class MarksError(ValueError):
    """A recording or its sidecar that cannot be checked, naming the file and the problem."""


@dataclass(frozen=True, slots=True)
class Sidecar:
    """A recording's sidecar: whose it is and where its sample 0 lies on the traces' clock."""

    device: str
    run_id: str
    sample_rate: int
    t0_ns: int

    def sample_of(self, t_ns: int) -> int:
        """The sample that holds moment ``t_ns`` (nearest, halves up), as the recorder placed it."""
        step = 1_000_000_000 // self.sample_rate
        return (t_ns - self.t0_ns + step // 2) // step


def read_sidecar(path: Path) -> Sidecar:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MarksError(f"{path}: not a readable sidecar: {exc}") from exc
    try:
        sidecar = Sidecar(str(data["device"]), str(data["run_id"]), int(data["sample_rate"]), int(data["t0_ns"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise MarksError(f"{path}: a sidecar needs device, run_id, sample_rate and t0_ns: {exc!r}") from exc
    if sidecar.sample_rate != SAMPLE_RATE:
        raise MarksError(f"{path}: sample_rate {sidecar.sample_rate}, the emulator records at {SAMPLE_RATE}")
    return sidecar


@dataclass(frozen=True, slots=True)
class TraceMarks:
    """One device turn as its traces place it in the recording (sample positions; None: not in the traces)."""

    question_id: str
    round: int
    ok: bool
    speech_end_ms: int | None  # where the clip's speech ends, clip ms (the run's VAD)
    speech_end: int | None  # the microphone captured the end of speech (left channel)
    first_audible: int | None  # the answer's first sample above the threshold (right channel)
    last_audible: int | None  # one past its last such sample

    @property
    def clip_start(self) -> int | None:
        """Where the clip's sample 0 would lie had every frame been sent exactly on time: exact for the
        frame that holds the end of speech (the others may sit a send's lateness apart)."""
        if self.speech_end is None or self.speech_end_ms is None:
            return None
        return self.speech_end - self.speech_end_ms * SAMPLE_RATE // 1000


def _int_or_none(value: AttrValue) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _device_of(turn: ReadSpan) -> str:
    index = _int_or_none(turn.attributes.get(names.DEVICE_INDEX))
    return str(index if index is not None else 0)


def trace_marks(sidecar: Sidecar, spans: Iterable[ReadSpan]) -> list[TraceMarks]:
    """The recording's device's turns of its run, in the order they were spoken."""
    problems = ReadProblems()
    turns = [
        t
        for t in group_turns(spans, problems)
        if t.first(names.DEVICE) is not None
        and str(t.turn.attributes.get(names.RUN_ID, "")) == sidecar.run_id
        and _device_of(t.turn) == sidecar.device
    ]
    marks = [_marks(sidecar, t) for t in turns]
    return sorted(marks, key=lambda m: (m.speech_end is None, m.speech_end or 0))


def _marks(sidecar: Sidecar, t: TurnSpans) -> TraceMarks:
    device, vad = t.first(names.DEVICE), t.first(names.VAD)
    assert device is not None

    def at(t_ns: int | None) -> int | None:
        return None if t_ns is None else sidecar.sample_of(t_ns)

    a = t.turn.attributes
    return TraceMarks(
        question_id=str(a.get(names.QUESTION_ID, "")),
        round=_int_or_none(a.get(names.ROUND)) or 0,
        ok=a.get(names.OK) is True,
        speech_end_ms=_int_or_none(vad.attributes.get(names.SPEECH_END_MS)) if vad is not None else None,
        speech_end=at(t.turn.event_ns(names.EV_USER_SPEECH_END)),
        first_audible=at(device.event_ns(names.EV_FIRST_AUDIBLE)),
        last_audible=at(device.event_ns(names.EV_LAST_AUDIBLE)),
    )


def read_recording(path: Path) -> np.ndarray:
    """The recording's samples, (n, 2) int16; refuses what the emulator does not write."""
    try:
        samples, rate = soundfile.read(path, dtype="int16", always_2d=True)
    except (OSError, RuntimeError, soundfile.LibsndfileError) as exc:
        raise MarksError(f"{path}: not a readable recording: {exc}") from exc
    if rate != SAMPLE_RATE or samples.shape[1] != 2:
        raise MarksError(f"{path}: {samples.shape[1]} channel(s) at {rate} Hz, the emulator writes 2 at 16 kHz")
    return np.asarray(samples)


@dataclass(frozen=True, slots=True)
class Found:
    """A turn's marks from its traces beside what the recording's speaker channel holds after its end of
    speech (up to the next turn's): the first sample above the threshold and one past the last."""

    marks: TraceMarks
    first_audible: int | None
    last_audible: int | None

    @property
    def first_off(self) -> int | None:
        """Found less traced, in samples (None where either is missing)."""
        m = self.marks.first_audible
        return None if m is None or self.first_audible is None else self.first_audible - m

    @property
    def last_off(self) -> int | None:
        m = self.marks.last_audible
        return None if m is None or self.last_audible is None else self.last_audible - m


def audible_between(channel: np.ndarray, start: int, stop: int, threshold: int = THRESHOLD) -> tuple[int, int] | None:
    """The first sample above ``threshold`` in ``channel[start:stop]`` and one past the last (absolute)."""
    start, stop = max(0, start), min(len(channel), stop)
    loud = np.flatnonzero(np.abs(channel[start:stop].astype(np.int32)) > threshold)
    return None if loud.size == 0 else (start + int(loud[0]), start + int(loud[-1]) + 1)


def check_recording(wav: Path, sidecar: Path, spans: Sequence[ReadSpan]) -> list[Found]:
    """Each of the recording's turns (by the traces) with what its speaker channel holds."""
    meta = read_sidecar(sidecar)
    samples = read_recording(wav)
    marks = trace_marks(meta, spans)
    found = []
    for i, m in enumerate(marks):
        if m.speech_end is None:
            found.append(Found(m, None, None))
            continue
        following = [n.speech_end for n in marks[i + 1 :] if n.speech_end is not None]
        stop = following[0] if following else len(samples)
        span = audible_between(samples[:, 1], m.speech_end, stop)
        found.append(Found(m, *(span or (None, None))))
    return found
