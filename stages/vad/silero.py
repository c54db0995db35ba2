"""Silero VAD (ONNX, run with onnxruntime) as a frame classifier.

The model takes 512-sample chunks at 16 kHz with 64 samples of context and a
recurrent state; a 60 ms frame holds one or two chunks, and the frame's speech
probability is the highest of them. About 0.2-0.3 ms per chunk here (STACK.md),
so it runs on the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.events import SAMPLE_RATE
from stages.registry import Implementation, Loaded, Models, TurnInputs
from stages.vad.endpointer import FrameVad

CHUNK = 512
CONTEXT = 64


class SileroModel:
    """The loaded ONNX model, shared by every turn (its recurrent state is per turn)."""

    def __init__(self, model_path: Path, threads: int = 1) -> None:
        import onnxruntime as ort  # imported here: the entry point sets ORT_DISABLE_TELEMETRY first

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            self.session: Any = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types for bad files
            raise ValueError(f"{model_path}: not a usable Silero VAD model ({exc})") from None


class SileroClassifier:
    name = "silero"

    def __init__(self, model: SileroModel) -> None:
        self._session = model.session
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros(CONTEXT, dtype=np.float32)
        self._buffer = np.zeros(0, dtype=np.float32)

    def speech_probability(self, pcm: bytes) -> float:
        samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        self._buffer = np.concatenate([self._buffer, samples])
        best = 0.0
        while len(self._buffer) >= CHUNK:
            chunk, self._buffer = self._buffer[:CHUNK], self._buffer[CHUNK:]
            x = np.concatenate([self._context, chunk])[np.newaxis, :]
            out, self._state = self._session.run(None, {"input": x, "state": self._state, "sr": self._sr})
            self._context = chunk[-CONTEXT:]
            best = max(best, float(out[0][0]))
        return best


@dataclass(frozen=True, slots=True)
class SileroSettings:
    model: str = "silero-vad"
    threshold: float = 0.5
    silence_ms: int = 600
    min_speech_ms: int = 120


def _load(s: SileroSettings, models: Models) -> Loaded:
    path = models.resolve(s.model)
    return Loaded(SileroModel(path), models.identity(s.model, path))


def _build(s: SileroSettings, model: SileroModel, _turn: TurnInputs) -> FrameVad:
    return FrameVad(SileroClassifier(model), s.silence_ms, s.min_speech_ms, s.threshold)


IMPLEMENTATION = Implementation("vad", "silero", SileroSettings, _build, load=_load)
