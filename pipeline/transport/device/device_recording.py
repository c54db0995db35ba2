"""The emulated device's recording (``--record-audio DIR``): what its microphone sent and its speaker played.

One stereo 16-bit WAV per device at the pipeline's 16 kHz, on the emulator's own clock, so that each
sample is a moment of the traces (docs: the issue 33 contract): sample 0 is when the device opened its
first connection; the left channel holds each uplink frame's PCM (the clip's, or the noise floor's)
where it was captured: in the ``duration`` before its due time, which is when it was handed to the
transport less that send's lateness (``pacer.Capture``: the microphone keeps its pace, so frames
follow each other without gap or overlap, where placing them by their sends would shift each by its
lateness, milliseconds on a busy machine); the right channel holds each played frame's decoded PCM
from the moment it began to play (the player's schedule, likewise without its timer's lateness).
Silence where nothing was sent or played. A sidecar JSON says where sample 0 lies on the traces'
clock (``t0_ns``); only a check against
the traces reads it, never the acoustic measurement.

The file is written as the device goes: what lies more than ``HOLD_S`` behind the newest sample written
is final (every write lands at most a frame and the loop's lateness behind its moment) and goes to disk,
so a device that runs for hours keeps a few seconds of audio in memory. A write that comes later still
(the loop stalled longer than that) loses what was already on disk, counted in the sidecar as
``late_samples``, a key that is there only when it is not zero.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile

from pipeline.events import SAMPLE_RATE

NS_PER_SAMPLE = 1_000_000_000 // SAMPLE_RATE  # 62,500 ns: whole, so a moment and its sample convert exactly
HOLD_S = 2.0  # audio kept in memory behind the newest sample: later writes than this are cut
_FLUSH_SAMPLES = SAMPLE_RATE  # written to disk a second at a time
MICROPHONE, SPEAKER = 0, 1  # the channels
CHANNELS = ("microphone", "speaker")


def sample_of(t_ns: int, t0_ns: int) -> int:
    """The sample that holds moment ``t_ns`` (rounded to the nearest, halves up: ``sample_of(t + k samples)``
    is ``sample_of(t) + k`` exactly)."""
    return (t_ns - t0_ns + NS_PER_SAMPLE // 2) // NS_PER_SAMPLE


@dataclass(frozen=True, slots=True)
class RecordTo:
    """Where a device's recording goes: ``folder/<name>.wav`` and ``folder/<name>.json``."""

    folder: Path
    name: str  # the device's index in the run
    run_id: str

    def open(self, t0_ns: int) -> AudioRecording:
        return AudioRecording(self, t0_ns)


class AudioRecording:
    """One device's stereo recording, from ``t0_ns`` (sample 0) on the emulator's clock."""

    def __init__(self, to: RecordTo, t0_ns: int) -> None:
        to.folder.mkdir(parents=True, exist_ok=True)
        self.to, self.t0_ns = to, t0_ns
        self.wav_path, self.json_path = to.folder / f"{to.name}.wav", to.folder / f"{to.name}.json"
        self._file = soundfile.SoundFile(self.wav_path, "w", SAMPLE_RATE, 2, "PCM_16", format="WAV")
        self._hold = int(HOLD_S * SAMPLE_RATE)
        self._buf = np.zeros((self._hold + 2 * _FLUSH_SAMPLES, 2), dtype=np.int16)
        self._base = 0  # the sample buf[0] holds: everything before it is on disk
        self._end = 0  # one past the newest sample written (absolute)
        self.late_samples = 0

    def microphone(self, pcm: bytes, captured_ns: int) -> None:
        """An uplink frame whose capture was complete at ``captured_ns``: captured in the ``duration`` before."""
        self._put(MICROPHONE, sample_of(captured_ns, self.t0_ns) - len(pcm) // 2, pcm)

    def speaker(self, pcm: bytes, start_ns: int) -> None:
        """A frame that began to play at ``start_ns``."""
        self._put(SPEAKER, sample_of(start_ns, self.t0_ns), pcm)

    def _put(self, channel: int, at: int, pcm: bytes) -> None:
        samples = np.frombuffer(pcm, dtype="<i2")
        if at < self._base:  # already on disk: what came this late is cut
            cut = min(self._base - at, samples.size)
            self.late_samples += cut
            samples, at = samples[cut:], at + cut
        end = at + samples.size
        self._room(end)
        self._buf[at - self._base : end - self._base, channel] = samples  # a later frame overwrites an overlap
        self._end = max(self._end, end)
        if self._end - self._hold - self._base >= _FLUSH_SAMPLES:
            self._flush(self._end - self._hold)

    def _room(self, end: int) -> None:
        if end - self._base > len(self._buf):
            grown = np.zeros((2 * (end - self._base), 2), dtype=np.int16)
            grown[: len(self._buf)] = self._buf
            self._buf = grown

    def _flush(self, upto: int) -> None:
        """Samples before ``upto`` to disk."""
        count = upto - self._base
        if count <= 0:
            return
        self._file.write(self._buf[:count])
        kept = len(self._buf) - count
        self._buf[:kept] = self._buf[count:]
        self._buf[kept:] = 0
        self._base = upto

    def close(self, end_ns: int) -> None:
        """Everything to disk, silence up to ``end_ns`` (the device's end), and the sidecar."""
        if self._file.closed:
            return
        end = max(self._end, sample_of(end_ns, self.t0_ns))
        self._room(end)
        self._flush(end)
        self._file.close()
        self.json_path.write_text(json.dumps(self.sidecar(), indent=1) + "\n", encoding="utf-8")

    def sidecar(self) -> dict[str, object]:
        """The sidecar's contents (the contract's keys; ``late_samples`` only where some were cut)."""
        out: dict[str, object] = {
            "device": self.to.name,
            "run_id": self.to.run_id,
            "sample_rate": SAMPLE_RATE,
            "t0_ns": self.t0_ns,
            "channels": list(CHANNELS),
        }
        if self.late_samples:
            out["late_samples"] = self.late_samples
        return out
