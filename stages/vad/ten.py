"""TEN VAD (the ``ten-vad`` package: a native library with its model built in) as a frame classifier under ``FrameVad``.

TEN VAD takes 16 kHz 16-bit PCM in hops of ``hop`` samples (256, 16 ms, its default; or 160, 10 ms) and keeps a
recurrent state per stream: one TEN handle per turn. A 60 ms frame's probability is the highest of the hops it
completes, as Silero's is of its chunks; the lab's end-pointer (``stages/vad/endpointer.py``) turns those into
speech start and end with the same hysteresis, ``min_speech_ms`` and ``silence_ms``. About 0.06 ms of CPU per hop
here, so it runs on the event loop. It meters its own CPU (the thread's CPU clock around each frame's hops): the
end-point is recorded as a ``VadDecision`` with the CPU of every frame classified, summed.

Needs the ``ten`` extra (``ten-vad``) and, for the Linux library, libc++ (Debian's ``libc++1``).
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.events import thread_cpu_ns
from stages.registry import ConfigError, Implementation, Loaded, Models, TurnInputs
from stages.vad.endpointer import FrameVad, check_end_pointing

PACKAGE = "ten-vad"
HOPS = (160, 256)  # the hop sizes TEN VAD is trained for: 10 ms and 16 ms at 16 kHz
MISSING = f"[vad] impl = 'ten' needs the {PACKAGE} package: pip install 'voice-latency-lab[ten]' ({PACKAGE}==1.0.6.9)"


class TenEngine:
    """TEN VAD's library, loaded once per run; each turn gets a handle of its own (``stream``)."""

    def __init__(self, hop: int, threshold: float) -> None:
        try:
            import ten_vad
        except ImportError:
            raise ValueError(MISSING) from None
        except OSError as exc:  # its native library did not load (libc++ missing)
            raise ValueError(f"{PACKAGE}'s native library does not load ({exc}): apt-get install libc++1") from None
        self._make: Any = ten_vad.TenVad
        self.hop = hop
        self.threshold = threshold
        self.version = importlib.metadata.version(PACKAGE)
        self.stream()  # the library is loaded now, not in the first turn

    def stream(self) -> Any:
        """A fresh TEN handle: its recurrent state starts empty."""
        try:
            return self._make(self.hop, self.threshold)
        except OSError as exc:  # the library is loaded by the first handle
            raise ValueError(f"{PACKAGE}'s native library does not load ({exc}): apt-get install libc++1") from None


class TenClassifier:
    """One turn's TEN VAD: a ``FrameClassifier`` that meters its own CPU (``MeteredClassifier``)."""

    name = "ten"

    def __init__(self, engine: TenEngine) -> None:
        self._engine = engine
        self.reset()

    def reset(self) -> None:
        self._vad = self._engine.stream()
        self._buffer = b""
        self.cpu_ns = 0
        self.frames = 0

    async def speech_probability(self, pcm: bytes) -> float:
        """The highest probability of the hops this frame completes (0 when it completes none)."""
        start = thread_cpu_ns()
        self._buffer += pcm
        size = self._engine.hop * 2
        best = 0.0
        while len(self._buffer) >= size:
            hop, self._buffer = self._buffer[:size], self._buffer[size:]
            probability, _flag = self._vad.process(np.frombuffer(hop, dtype="<i2"))
            best = max(best, float(probability))
        self.cpu_ns += thread_cpu_ns() - start
        self.frames += 1
        return best


@dataclass(frozen=True, slots=True)
class TenSettings:
    """The ``[vad]`` keys of ``impl = "ten"``: TEN's hop and threshold, and the lab's end-pointing."""

    threshold: float = 0.5  # TEN VAD's default
    silence_ms: int = 600
    min_speech_ms: int = 120
    hop: int = 256  # samples per TEN hop: 256 (16 ms, TEN's default) or 160 (10 ms)

    def __post_init__(self) -> None:
        check_end_pointing(self.threshold, self.silence_ms, self.min_speech_ms)
        if self.hop not in HOPS:
            raise ConfigError(f"[vad] hop = {self.hop}: TEN VAD takes hops of {' or '.join(map(str, HOPS))} samples")


def _load(s: TenSettings, _models: Models) -> Loaded:
    engine = TenEngine(s.hop, s.threshold)
    return Loaded(engine, f"{PACKAGE}=={engine.version}")


def _build(s: TenSettings, engine: TenEngine, _turn: TurnInputs) -> FrameVad:
    return FrameVad(TenClassifier(engine), s.silence_ms, s.min_speech_ms, s.threshold)


IMPLEMENTATION = Implementation("vad", "ten", TenSettings, _build, load=_load)
