"""A call's recording (``--record-audio DIR`` on a bot's line): what the caller said and what its phone played.

The same file as a xiaozhi device's (``device_recording``: a stereo 16-bit WAV at 16 kHz from the call's start,
the microphone left, the speaker right, and its sidecar), so ``pipeline.acoustic measure`` reads it as it reads
the emulator's. The line's audio (8 kHz on Twilio's wire, 16 kHz on Pipecat's) goes in at 16 kHz: 8 kHz by
repeating each sample, so a sample's moment is kept exactly (the first audible sample at 8 kHz is the first at
16 kHz, at the same nanosecond); another rate through soxr. Each frame the caller sent is written where it was
captured (the 20 ms before its due time); what the bot sent is written as the phone plays it: at each frame of
the line, the part of every queued chunk that has played since, so a ``clear`` keeps out what never played and
nothing is written far ahead of the microphone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import soxr

from pipeline.events import SAMPLE_RATE
from pipeline.transport.device.device_recording import NS_PER_SAMPLE, AudioRecording
from pipeline.transport.device.phone_playout import Chunk


def at_rate(pcm: np.ndarray, rate: int, to: int) -> np.ndarray:
    """16-bit audio at ``rate`` as audio at ``to``: as it is at the same rate, each sample repeated where ``to`` is a
    whole multiple of ``rate`` (every sample's moment kept), else resampled by soxr. One way for the line's audio,
    either direction (the clip down to the line, the line up to the recording)."""
    pcm = np.asarray(pcm, dtype=np.int16)
    if rate == to:
        return pcm
    if to > rate and to % rate == 0:
        return np.repeat(pcm, to // rate)
    out = np.asarray(soxr.resample(pcm.astype(np.float32), rate, to), dtype=np.float32)
    return np.clip(np.rint(out), -32768, 32767).astype(np.int16)


def at_recording_rate(pcm: np.ndarray, rate: int) -> np.ndarray:
    """16-bit audio at ``rate`` as the recording's 16 kHz (``at_rate``)."""
    return at_rate(pcm, rate, SAMPLE_RATE)


@dataclass(slots=True)
class _Playing:
    """A chunk of the bot's audio queued to play, at 16 kHz, and how much of it is written."""

    chunk: Chunk
    pcm: np.ndarray
    written: int = 0


class CallRecording:
    """One call's recording, on an ``AudioRecording`` opened at the call's start."""

    def __init__(self, recording: AudioRecording) -> None:
        self.recording = recording
        self.playing: list[_Playing] = []

    def said(self, pcm: np.ndarray, rate: int, captured_ns: int) -> None:
        """A frame of the caller's audio, its capture complete at ``captured_ns``."""
        self.recording.microphone(at_recording_rate(pcm, rate).astype("<i2").tobytes(), captured_ns)

    def queued(self, chunk: Chunk, pcm: np.ndarray) -> None:
        """A chunk of the bot's audio now in the playout buffer (``chunk``: where it plays)."""
        self.playing.append(_Playing(chunk, at_recording_rate(pcm, chunk.rate)))

    def played_by(self, now_ns: int) -> None:
        """What has played by ``now_ns`` and is not written yet, written; chunks done with, let go."""
        kept = []
        for p in self.playing:
            chunk = p.chunk
            played = chunk.samples if now_ns >= chunk.end_ns else max(0, chunk.index_at(now_ns))
            upto = min(len(p.pcm), played * SAMPLE_RATE // chunk.rate)  # a clear cut chunk.samples short
            if upto > p.written:
                start = chunk.start_ns + p.written * NS_PER_SAMPLE
                self.recording.speaker(p.pcm[p.written : upto].astype("<i2").tobytes(), start)
                p.written = upto
            if now_ns < chunk.end_ns:
                kept.append(p)
        self.playing = kept

    def close(self, end_ns: int) -> None:
        self.played_by(end_ns)
        self.recording.close(end_ns)
