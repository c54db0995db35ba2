"""One Silero call for every stream's pending chunk: the chunks submitted in one event-loop turn run as one batch.

A server hears every connection's microphone at once, and Silero costs about 0.12 ms a call
for one chunk but about 0.05 ms a chunk in batches of tens (measured here, one thread; the
model takes ``input [B, 576]`` and ``state [2, B, 128]``). Each stream still owns its recurrent
state and its 64 samples of context; a chunk is submitted with them and the batch is run by a
callback scheduled with ``call_soon`` when the first chunk of a batch arrives, so every chunk
submitted before the loop gets to it (every stream whose frame arrived in the same turn of the
loop) joins it. A busy loop makes larger batches, which cost less per chunk: the batching
adapts to the load without a timer, and no chunk waits longer than the loop's current turn.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from typing import Any

import numpy as np

from pipeline.events import SAMPLE_RATE

CHUNK = 512
CONTEXT = 64
STATE_SHAPE = (2, 1, 128)


class _Pending:
    """The chunks waiting for the next batch, on the loop that will run it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.chunks: list[bytes] = []
        self.contexts: list[np.ndarray] = []
        self.states: list[np.ndarray] = []
        self.futures: list[asyncio.Future[tuple[float, np.ndarray, np.ndarray]]] = []


class SileroBatcher:
    """``await submit(pcm, context, state)`` -> (probability, next context, next state), batched per loop turn.

    With an ``executor`` (one thread), a batch runs there while the loop goes on serving (onnxruntime lets go
    of the GIL), and the chunks submitted meanwhile make the next batch, started when this one ends: one batch
    at a time, so a stream's chunks are still heard in order. Without one it runs on the loop, as a virtual
    clock needs (its time would jump ahead while the loop waited for a thread)."""

    def __init__(self, session: Any, executor: Executor | None = None, window_ms: float = 0.0) -> None:
        self._session = session
        self._executor = executor
        self._window_s = window_ms / 1000
        self._cooling: asyncio.AbstractEventLoop | None = None  # the loop whose window since the last start runs
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        self._pending: _Pending | None = None  # collecting
        self._running: _Pending | None = None  # on the executor's thread
        self.calls = 0  # how many model calls, and how many chunks they held: the batching, observable
        self.chunks = 0

    def submit(
        self, pcm: bytes, context: np.ndarray, state: np.ndarray
    ) -> asyncio.Future[tuple[float, np.ndarray, np.ndarray]]:
        """Queue one chunk of 16-bit PCM with its stream's context and state; the future holds its results."""
        if len(pcm) != CHUNK * 2:
            raise ValueError(f"a Silero chunk is {CHUNK} samples, not {len(pcm) // 2}")
        loop = asyncio.get_running_loop()
        pending = self._pending
        if pending is None or pending.loop is not loop:  # a batch left on a loop that stopped is not ours
            pending = self._pending = _Pending(loop)
            running = self._running
            if running is None or running.loop is not loop:  # else the running batch starts this one when done
                self._schedule(pending)
        future: asyncio.Future[tuple[float, np.ndarray, np.ndarray]] = loop.create_future()
        pending.chunks.append(pcm)
        pending.contexts.append(context)
        pending.states.append(state)
        pending.futures.append(future)
        return future

    def _schedule(self, pending: _Pending) -> None:
        """At the end of this loop turn, or when the window after the latest batch's start ends, whichever is
        later (a timer, not a reading of the clock: stages never read it)."""
        if self._cooling is not pending.loop:
            pending.loop.call_soon(self._start, pending)

    def _cooled(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._cooling is loop:
            self._cooling = None
        nxt = self._pending
        if nxt is not None and nxt.loop is loop and (self._running is None or self._running.loop is not loop):
            self._schedule(nxt)

    def _start(self, pending: _Pending) -> None:
        if self._pending is pending:
            self._pending = None
        if self._window_s > 0:
            self._cooling = pending.loop
            pending.loop.call_later(self._window_s, self._cooled, pending.loop)
        if self._executor is None:
            try:
                _deliver(pending, self.run(pending.chunks, pending.contexts, pending.states))
            except Exception as exc:  # every stream in the batch hears the model's failure
                _fail(pending, exc)
            return
        self._running = pending
        work = pending.loop.run_in_executor(self._executor, self.run, pending.chunks, pending.contexts, pending.states)
        work.add_done_callback(lambda done: self._ended(pending, done))

    def _ended(self, batch: _Pending, done: asyncio.Future[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        if self._running is batch:
            self._running = None
        exc = None if done.cancelled() else done.exception()
        if exc is not None or done.cancelled():
            _fail(batch, exc if isinstance(exc, Exception) else RuntimeError("the Silero batch was cancelled"))
        else:
            _deliver(batch, done.result())
        nxt = self._pending
        if nxt is not None and nxt.loop is batch.loop:
            self._schedule(nxt)

    def run(
        self, chunks: list[bytes], contexts: list[np.ndarray], states: list[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One model call: the probabilities [B], the next states [2, B, 128] and the inputs [B, 576]."""
        batch = len(chunks)
        x = np.empty((batch, CONTEXT + CHUNK), dtype=np.float32)
        x[:, :CONTEXT] = contexts
        pcm = np.frombuffer(b"".join(chunks), dtype="<i2").reshape(batch, CHUNK)
        np.multiply(pcm, 1 / 32768.0, out=x[:, CONTEXT:], casting="unsafe")
        state = states[0] if batch == 1 else np.concatenate(states, axis=1)
        out, next_state = self._session.run(None, {"input": x, "state": state, "sr": self._sr})
        self.calls += 1  # on one thread at a time: the loop's, or the executor's while the loop waits for it
        self.chunks += batch
        return out[:, 0], next_state, x


def _deliver(batch: _Pending, results: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    probabilities, states, x = results
    for i, future in enumerate(batch.futures):
        if not future.done():  # a turn cancelled meanwhile no longer waits
            future.set_result((float(probabilities[i]), x[i, -CONTEXT:], states[:, i : i + 1, :]))


def _fail(batch: _Pending, exc: Exception) -> None:
    for future in batch.futures:
        if not future.done():
            future.set_exception(exc)
