"""Sound in and out through the operating system's audio stack: sounddevice on PortAudio.

A ``Recorder`` keeps everything an input device hears, block by block, with the stream's own
timing (PortAudio's time of each block's first sample at the converter, and the latency it
reports). A ``Speaker`` plays into an output device: each ``Lane`` (a voice, a device's speaker)
schedules its audio at a stream time, the lanes are mixed in the callback, silence where none
plays. Scheduling by stream time rather than "as soon as possible" keeps the sound where it was
asked for whatever the callback's block size: a chunk written now plays ``delay_s`` from now (by
the stream's clock, its blocks' time info smoothed: within a couple of milliseconds, measured
here), and chunks written for the same time or back to back keep their distance to the sample, so
the silence between a question and its answer is what it was when the emulator played them.

Devices are named as sounddevice takes them (an index or a part of a name). A PulseAudio sink or
source is ALSA's ``pulse`` device with ``PULSE_SINK``/``PULSE_SOURCE`` naming it in the
environment (libpulse reads them as a stream opens). sounddevice is imported when a stream
opens, so the rest of the lab needs neither it nor PortAudio.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Pcm = npt.NDArray[np.float32]


SMOOTH = 10  # blocks either side: a block's time info is smoothed over this many (its jitter is milliseconds)


def smoothed(zeros: list[float], at: int) -> float:
    """The median of the stream's times of sample 0 by the blocks around block ``at`` (each block's own
    time info is off by up to a few milliseconds; their median follows the clock, not the jitter)."""
    return float(np.median(zeros[max(0, at - SMOOTH) : at + SMOOTH + 1])) if zeros else 0.0


def lost_s(zeros: list[float], window: int = 5, least_s: float = 0.002) -> float:
    """Sound lost between blocks: the steps, beyond ``least_s``, between the medians of consecutive
    ``window``-block runs of sample 0's times that the run after them keeps. A lost stretch moves every
    later block's sample 0 on and shows in one lasting step; a block's late time info (PulseAudio's
    jitters by a few milliseconds: a single 3.1 ms spike failed CI when the raw steps were summed), or a
    run of them, moves its run's median and the next run's back. Steps too small to count are also
    the stream clock's drift against the sample rate (a card's crystal), which is no loss."""
    runs = [float(np.median(zeros[i : i + window])) for i in range(0, len(zeros) - window + 1, window)]
    lost = 0.0
    for k in range(len(runs) - 1):
        step = runs[k + 1] - runs[k]
        kept = k + 2 >= len(runs) or runs[k + 2] - runs[k] > least_s
        if step > least_s and kept:
            lost += step
    return lost


class SoundError(RuntimeError):
    """No sound device to open, or PortAudio missing: says which and what to install."""


def sounddevice() -> Any:
    """The sounddevice module; a clear error when it or PortAudio (libportaudio2) is missing."""
    try:
        import sounddevice as sd
    except ImportError as exc:
        raise SoundError(
            f"sound needs sounddevice and PortAudio (pip: sounddevice; Debian: libportaudio2): {exc}"
        ) from exc
    except OSError as exc:  # sounddevice is there, PortAudio is not
        raise SoundError(f"PortAudio could not be loaded (Debian: libportaudio2): {exc}") from exc
    return sd


def device_of(spec: str) -> int | str:
    """A device as sounddevice takes it: an index, or a part of its name."""
    return int(spec) if spec.isdigit() else spec


def _open(factory: Callable[..., Any], spec: str, kind: str, **kwargs: Any) -> Any:
    sd = sounddevice()
    device = device_of(spec)
    try:
        return factory(sd)(device=device, channels=1, dtype="float32", **kwargs)
    except ValueError:
        # PortAudio lists devices once, when it starts: a sound server started since (ALSA's pulse
        # device is listed only while one answers) is seen after a restart (sounddevice's own idiom)
        sd._terminate()
        sd._initialize()
    try:
        return factory(sd)(device=device, channels=1, dtype="float32", **kwargs)
    except (ValueError, sd.PortAudioError) as exc:
        names = ", ".join(str(d["name"]) for d in sd.query_devices())
        raise SoundError(
            f"{kind} device {spec!r} could not be opened ({exc}); PortAudio has: {names or 'none'}"
        ) from exc


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """What PortAudio said of a stream: its device, rate, block and latency (seconds)."""

    device: str
    sample_rate: int
    blocksize: int
    latency_s: float


class Recorder:
    """An input stream kept whole: ``samples()`` is everything heard since it started.

    ``adc_time(i)`` is when sample ``i`` was at the converter by the stream's own time info (the blocks'
    ``inputBufferAdcTime``, counted on in samples): the recording's clock, the one a ``Speaker``'s
    lanes are scheduled on (PortAudio's stream time, one clock for every stream of a host API).
    """

    def __init__(self, device: str, sample_rate: int = 16000, blocksize: int = 800, latency: float = 0.1) -> None:
        self.sample_rate = sample_rate
        self._blocks: list[Pcm] = []
        self._count = 0
        self._lock = threading.Lock()
        self._anchors: list[float] = []
        self._starts: list[int] = []
        self.overflows = 0
        self.running = threading.Event()
        self.stream = _open(
            lambda sd: sd.InputStream,
            device,
            "input",
            samplerate=sample_rate,
            blocksize=blocksize,
            latency=latency,
            callback=self._callback,
        )
        self.info = StreamInfo(device, sample_rate, blocksize, float(self.stream.latency))

    def _callback(self, indata: Pcm, frames: int, info: Any, status: Any) -> None:
        if status.input_overflow:
            self.overflows += 1
        with self._lock:
            # the block's start on the stream's clock, less the samples before it: sample 0's time by this block
            self._anchors.append(float(info.inputBufferAdcTime) - self._count / self.sample_rate)
            self._starts.append(self._count)
            self._blocks.append(indata[:, 0].copy())
            self._count += frames
        self.running.set()

    def __enter__(self) -> Recorder:
        return self.start()

    def start(self, timeout_s: float = 10.0) -> Recorder:
        """Starts the stream and returns once its first block has come: from then on it is recording."""
        self.stream.start()
        if not self.running.wait(timeout_s):
            self.close()
            raise SoundError(f"input {self.info.device!r}: nothing recorded within {timeout_s:g} s of starting")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.stream.stop()
        self.stream.close()

    @property
    def count(self) -> int:
        """Samples heard so far."""
        return self._count

    def samples(self, start: int = 0) -> Pcm:
        """What was heard from sample ``start`` on (only the blocks from there are copied)."""
        with self._lock:
            first = max(0, bisect.bisect_right(self._starts, start) - 1)
            blocks, offset = self._blocks[first:], self._starts[first] if self._starts else 0
        joined = np.concatenate(blocks) if blocks else np.zeros(0, np.float32)
        return joined[max(0, start - offset) :]

    def index_of(self, t: float) -> int:
        """The sample heard at stream time ``t``, by the latest block's time info."""
        with self._lock:
            if not self._anchors:
                raise SoundError(f"{self.info.device!r}: nothing recorded yet")
            zero = smoothed(self._anchors, len(self._anchors) - 1)
        return round((t - zero) * self.sample_rate)

    def adc_time(self, index: float) -> float:
        """The stream time of sample ``index`` (seconds), by the time info of the block that holds it."""
        with self._lock:
            if not self._anchors:
                raise SoundError(f"{self.info.device!r}: nothing recorded yet")
            block = max(0, bisect.bisect_right(self._starts, index) - 1)
            zero = smoothed(self._anchors, block)
        return zero + index / self.sample_rate

    @property
    def gaps_s(self) -> float:
        """Sound the stream lost between its blocks (their time info moved on more than their samples did)."""
        with self._lock:
            return lost_s(self._anchors)


@dataclass(slots=True)
class _Chunk:
    start: int  # the stream's sample index of its first sample
    pcm: Pcm
    begun: bool = False  # some of it has been played


class Lane:
    """One source into a ``Speaker``: what it writes plays ``delay_s`` after it was written, in order.

    Positions are the stream's sample indices: a chunk that follows another plays right after it, to
    the sample, whatever the jitter of the stream's time info."""

    def __init__(self, speaker: Speaker, name: str) -> None:
        self.speaker, self.name = speaker, name
        self.chunks: deque[_Chunk] = deque()
        self.end = 0  # sample index where the last chunk written ends
        self.late = 0  # times a chunk was due before the block being played: its schedule moved on

    def write(self, pcm: Pcm, at: float | None = None) -> float:
        """Plays ``pcm`` from ``at`` (stream time; default now) + the speaker's delay, or after what this lane
        already holds; returns the stream time its first sample plays."""
        sp = self.speaker
        due = (sp.now() if at is None else at) + sp.delay_s
        with sp.lock:
            start = max(sp.index_at(due), self.end)
            self.chunks.append(_Chunk(start, np.asarray(pcm, np.float32)))
            self.end = start + len(pcm)
            return sp.time_of(start)

    def render(self, out: Pcm, first: int) -> None:
        """Adds this lane's sound to the block whose first sample is the stream's sample ``first``."""
        frames = len(out)
        while self.chunks:
            chunk = self.chunks[0]
            if not chunk.begun and chunk.start < first:
                self._move_on(first - chunk.start)
            offset = chunk.start - first
            if offset >= frames:
                return
            chunk.begun = True
            skip, at = max(0, -offset), max(0, offset)
            take = chunk.pcm[skip : skip + frames - at]
            out[at : at + len(take)] += take
            if skip + len(take) < len(chunk.pcm):
                return
            self.chunks.popleft()

    def _move_on(self, by: int) -> None:
        """The head chunk's time has passed unplayed: it and all after it play ``by`` samples later."""
        self.late += 1
        for chunk in self.chunks:
            chunk.start += by
        self.end += by


class Speaker:
    """An output stream that mixes its lanes; silence where none plays.

    ``delay_s`` (default: the stream's reported latency + two blocks) is the distance from a write to its
    sound: long enough that a chunk is never written after its block was rendered."""

    def __init__(
        self,
        device: str,
        sample_rate: int = 16000,
        blocksize: int = 800,
        latency: float = 0.1,
        delay_s: float | None = None,
    ) -> None:
        self.sample_rate = sample_rate
        self.lock = threading.Lock()
        self.lanes: list[Lane] = []
        self.underflows = 0
        self.callbacks = 0
        self.played = 0  # samples handed to the stream so far: the next block's first sample index
        self._zeros: deque[float] = deque(maxlen=2 * SMOOTH + 1)  # the latest blocks' time of sample 0
        self.running = threading.Event()
        self.stream = _open(
            lambda sd: sd.OutputStream,
            device,
            "output",
            samplerate=sample_rate,
            blocksize=blocksize,
            latency=latency,
            callback=self._callback,
        )
        self.info = StreamInfo(device, sample_rate, blocksize, float(self.stream.latency))
        self.delay_s = delay_s if delay_s is not None else self.info.latency_s + 2 * blocksize / sample_rate
        # PortAudio fills its buffer with the first callbacks, all at once: the stream runs after them
        self._priming = -(-round(self.info.latency_s * sample_rate) // blocksize)

    def lane(self, name: str) -> Lane:
        lane = Lane(self, name)
        with self.lock:
            self.lanes.append(lane)
        return lane

    def now(self) -> float:
        """The stream's clock (seconds), the one its time info and the lanes' times are on."""
        return float(self.stream.time)

    def _callback(self, outdata: Pcm, frames: int, info: Any, status: Any) -> None:
        if status.output_underflow:
            self.underflows += 1
        out = np.zeros(frames, np.float32)
        with self.lock:
            first = self.played
            self._zeros.append(float(info.outputBufferDacTime) - first / self.sample_rate)
            for lane in self.lanes:
                lane.render(out, first)
            self.played += frames
        outdata[:, 0] = np.clip(out, -1.0, 1.0)
        self.callbacks += 1
        if self.callbacks >= self._priming + 2:
            self.running.set()

    def index_at(self, t: float) -> int:
        """The stream's sample index that plays at stream time ``t`` (by the latest block; under ``lock``)."""
        return round((t - smoothed(list(self._zeros), len(self._zeros) - 1)) * self.sample_rate)

    def time_of(self, index: int) -> float:
        """When the stream's sample ``index`` plays (stream time; under ``lock``)."""
        return smoothed(list(self._zeros), len(self._zeros) - 1) + index / self.sample_rate

    def busy_until(self) -> float:
        """The stream time when everything written so far has played."""
        with self.lock:
            return self.time_of(max((lane.end for lane in self.lanes), default=self.played))

    @property
    def late(self) -> int:
        return sum(lane.late for lane in self.lanes)

    def __enter__(self) -> Speaker:
        return self.start()

    def start(self, timeout_s: float = 10.0) -> Speaker:
        """Starts the stream and returns once it runs at the device's pace (past its first buffer's priming:
        a PulseAudio null sink, idle, can hold a new stream there for a second or two)."""
        self.stream.start()
        if not self.running.wait(timeout_s):
            self.close()
            raise SoundError(f"output {self.info.device!r}: not playing within {timeout_s:g} s of starting")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, timeout_s: float = 30.0) -> None:
        """Stops the stream once everything written has played (at most ``timeout_s`` more)."""
        end = self.busy_until() + self.info.latency_s
        while self.stream.active and self.now() < end and timeout_s > 0:
            time.sleep(0.02)
            timeout_s -= 0.02
        self.stream.stop()
        self.stream.close()


def pcm16(data: bytes) -> Pcm:
    """16-bit little-endian PCM as float32 in [-1, 1)."""
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
