"""Silero VAD (ONNX, run with onnxruntime) as a frame or chunk classifier, under one of two end-pointers.

The model takes 512-sample chunks at 16 kHz with 64 samples of context and a
recurrent state. About 0.2-0.3 ms per chunk here (docs/reference/stack.md), so it runs on the event loop, batched over
every stream whose chunk is pending in the same turn of the loop (``silero_batch``).

``[vad] profile`` picks the end-pointer:

- ``"lab"`` (default): ``FrameVad`` over 60 ms frames, a frame's probability being the highest
  of the one or two chunks it completes; hysteresis, ``min_speech_ms``, ``silence_ms`` in audio time.
- ``"xiaozhi-server"``: ``XiaozhiServerVad``, the xiaozhi-esp32-server's own rule on every chunk
  (dual threshold, 3-of-5 vote, silence between frame arrivals), with the settings of
  ``[vad.xiaozhi_server]``; the lab's ``threshold``, ``silence_ms`` and ``min_speech_ms`` do not apply.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.events import VAD_PROFILES, XiaozhiServerProfile
from stages.registry import ConfigError, Implementation, Loaded, Models, TurnInputs, load_file
from stages.vad.endpointer import FrameVad, check_end_pointing
from stages.vad.silero_batch import CHUNK, CONTEXT, STATE_SHAPE, SileroBatcher
from stages.vad.xiaozhi import XiaozhiServerVad

PROFILES = VAD_PROFILES


class SileroModel:
    """The loaded ONNX model, shared by every turn (its recurrent state is per turn), and its batcher: every
    stream's chunk pending in one turn of the event loop goes to the model in one call."""

    def __init__(
        self, model_path: Path, threads: int = 1, batch_thread: bool = False, batch_window_ms: float = 0.0
    ) -> None:
        import onnxruntime as ort  # imported here: the entry point sets ORT_DISABLE_TELEMETRY first

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            self.session: Any = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types for bad files
            raise ValueError(f"{model_path}: not a usable Silero VAD model ({exc})") from None
        executor = ThreadPoolExecutor(1, thread_name_prefix="silero") if batch_thread else None
        self.batcher = SileroBatcher(self.session, executor, batch_window_ms)


class SileroClassifier:
    """One turn's Silero over the shared model, holding the turn's recurrent state: a ``FrameClassifier`` for the
    lab's end-pointer and a ``ChunkClassifier`` for the xiaozhi-server one."""

    name = "silero"

    def __init__(self, model: SileroModel) -> None:
        self._batcher = model.batcher
        self.reset()

    def reset(self) -> None:
        self._state = np.zeros(STATE_SHAPE, dtype=np.float32)
        self._context = np.zeros(CONTEXT, dtype=np.float32)
        self._buffer = b""

    async def speech_probability(self, pcm: bytes) -> float:
        """The highest probability of the chunks this frame completes (0 when it completes none)."""
        self._buffer += pcm
        best = 0.0
        while len(self._buffer) >= CHUNK * 2:
            chunk, self._buffer = self._buffer[: CHUNK * 2], self._buffer[CHUNK * 2 :]
            best = max(best, await self._run(chunk))
        return best

    async def chunk_probability(self, pcm: bytes) -> float:
        """The probability of exactly one chunk (the caller cuts the chunks)."""
        return await self._run(pcm)

    async def _run(self, chunk: bytes) -> float:
        p, self._context, self._state = await self._batcher.submit(chunk, self._context, self._state)
        return p


@dataclass(frozen=True, slots=True)
class SileroSettings:
    """The ``[vad]`` keys of ``impl = "silero"``: the model, the end-pointer (``profile``) and the settings of each."""

    model: str = "silero-vad"
    threshold: float = 0.5
    silence_ms: int = 600
    min_speech_ms: int = 120
    profile: str = "lab"  # or "xiaozhi-server"
    # the batches run on a thread of their own beside the event loop (a server's second core), not on the loop;
    # for the real clock only: a virtual clock's time would jump ahead while the loop waited for the thread
    batch_thread: bool = False
    # a batch starts no sooner than this after the one before (0: as soon as the loop's turn ends), so that
    # chunks gather into batches at any load; each waits at most this long for its probability
    batch_window_ms: float = 0.0
    xiaozhi_server: XiaozhiServerProfile = field(default_factory=XiaozhiServerProfile)

    def __post_init__(self) -> None:
        check_end_pointing(self.threshold, self.silence_ms, self.min_speech_ms)
        if self.profile not in PROFILES:
            raise ConfigError(f"[vad] profile = {self.profile!r}: choose one of {', '.join(PROFILES)}")
        if not 0 <= self.batch_window_ms <= 100:
            raise ConfigError(f"[vad] batch_window_ms = {self.batch_window_ms}: between 0 and 100 ms")
        if problem := self.xiaozhi_server.problem():
            raise ConfigError(f"[vad.xiaozhi_server] {problem}")


def _load(s: SileroSettings, models: Models) -> Loaded:
    return load_file(
        models, s.model, lambda path: SileroModel(path, batch_thread=s.batch_thread, batch_window_ms=s.batch_window_ms)
    )


def _build(s: SileroSettings, model: SileroModel, _turn: TurnInputs) -> FrameVad | XiaozhiServerVad:
    if s.profile == "xiaozhi-server":
        return XiaozhiServerVad(SileroClassifier(model), s.xiaozhi_server)
    return FrameVad(SileroClassifier(model), s.silence_ms, s.min_speech_ms, s.threshold, profile="lab")


IMPLEMENTATION = Implementation("vad", "silero", SileroSettings, _build, load=_load)
