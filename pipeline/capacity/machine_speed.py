"""The machine's speed for the work a server does, measured beside every capacity step and soak window.

A capacity figure is a property of a server *on a machine at a moment*: on one fresh machine of this
project the same 1,000-device fleet cost its sink three times the CPU it cost on a fast hour, and the
load generator's send lateness P99 moved from 0.5 ms to 34-94 ms. So each step and each soak window
records how long four fixed pieces of work took just then, each what a xiaozhi server spends its time on:

- ``json_ms``: the standard library decoding a fixed control-message document (every text frame);
- ``socket_ms``: round trips of a small message over a loopback TCP connection (every packet's syscalls);
- ``opus_ms``: encoding and decoding 3 s of a fixed signal with libopus (every device's audio);
- ``onnx_ms``: Silero VAD's ONNX model on fixed chunks with onnxruntime (the server's VAD), None where the
  model package is not installed: not measured, never zero.

Each is the fastest of ``REPEATS`` tries; lower is faster. A probe taken while devices are being served
also measures their load: the record says which it was (before a step's devices start, or at a soak
window's end, with the devices still asking).
"""

from __future__ import annotations

import contextlib
import json
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from pipeline.records.ramp_result import MachineSpeed

JSON_REPEATS = 2000
ROUND_TRIPS = 300
OPUS_FRAMES = 50  # 3 s of 60 ms frames
ONNX_CHUNKS = 200  # 6.4 s of 32 ms chunks
_MESSAGE = b"x" * 64


REPEATS = 3  # each piece's fastest of three, as timeit reports: a slower one measured a neighbour's burst


def _timed(work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 3)


def _document() -> str:
    # a hello and a listen as a device sends them, with an MCP tools list: the shapes a server decodes most
    tools = [{"name": f"self.tool_{i}", "description": "d" * 40, "inputSchema": {"type": "object"}} for i in range(8)]
    return json.dumps(
        {
            "type": "hello",
            "version": 1,
            "transport": "websocket",
            "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
            "features": {"mcp": True},
            "tools": tools,
        }
    )


def json_work() -> None:
    document = _document()
    for _ in range(JSON_REPEATS):
        json.loads(document)


def socket_work() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        peer: list[socket.socket] = []
        accepted = threading.Thread(target=lambda: peer.append(server.accept()[0]))
        accepted.start()
        with socket.create_connection(server.getsockname()) as client:
            accepted.join()
            with peer[0] as other:
                for sock in (client, other):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                echo = threading.Thread(target=_echo, args=(other,))
                echo.start()
                for _ in range(ROUND_TRIPS):
                    client.sendall(_MESSAGE)
                    _read(client, len(_MESSAGE))
                client.shutdown(socket.SHUT_WR)
                echo.join()


def _echo(sock: socket.socket) -> None:
    while data := sock.recv(4096):
        sock.sendall(data)


def _read(sock: socket.socket, size: int) -> None:
    got = 0
    while got < size:
        chunk = sock.recv(size - got)
        if not chunk:
            raise ConnectionError("the echo closed early")
        got += len(chunk)


def _signal(samples: int) -> np.ndarray:
    t = np.arange(samples) / 16000
    rng = np.random.default_rng(7)
    return 0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(samples)


def opus_work() -> None:
    from pipeline.events import FRAME_BYTES
    from pipeline.transport.wire.opus import OpusDecoder, OpusEncoder

    pcm = (_signal(OPUS_FRAMES * FRAME_BYTES // 2) * 32767).astype("<i2").tobytes()
    encoder, decoder = OpusEncoder(), OpusDecoder()
    for i in range(OPUS_FRAMES):
        decoder.decode(encoder.encode(pcm[i * FRAME_BYTES : (i + 1) * FRAME_BYTES]))


def onnx_session() -> Callable[[], None] | None:
    """Silero's model loaded once (the load is not what is timed), or None without the model package."""
    try:
        import onnxruntime as ort

        from pipeline.settings.models import resolve

        with tempfile.TemporaryDirectory() as cache:  # silero's one file is used where pip put it
            path = resolve("silero-vad", Path(cache))
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception:  # no onnxruntime, no model package, a model it cannot load: not measured
        return None
    chunk = _signal(576).astype(np.float32)[None, :]  # 512 samples and 64 of context, as the lab's VAD feeds it
    sr = np.array(16000, dtype=np.int64)

    def work() -> None:
        state = np.zeros((2, 1, 128), dtype=np.float32)
        for _ in range(ONNX_CHUNKS):
            _out, state = session.run(None, {"input": chunk, "state": state, "sr": sr})

    return work


def measure() -> MachineSpeed:
    """The four pieces of work timed now, one after the other, on this thread."""
    onnx = onnx_session()
    opus: float | None = None
    with contextlib.suppress(Exception):  # libopus missing: not measured
        opus = _timed(opus_work)
    return MachineSpeed(
        json_ms=_timed(json_work),
        socket_ms=_timed(socket_work),
        opus_ms=opus,
        onnx_ms=None if onnx is None else _timed(onnx),
    )
