"""The open-source xiaozhi-esp32-server (github:xinnan-tech/xiaozhi-esp32-server), run from a user's checkout.

Only what the selected providers import is installed, into a venv of its own: SileroVAD
(its ONNX model is in the repository), ``OpenaiASR`` and the ``openai`` TTS pointed at the
lab's speech services, an ``openai``-type LLM pointed at the lab's relay, no memory, no
intent. The checkout's ``requirements.txt`` pins torch, FunASR, ModelScope and others that a
local-provider run never loads; the packages below are the ones its import of ``app.py``
and of those providers needs (found by starting it until nothing was missing), each at the
version the checkout pins where it pins one. The server reads its settings from
``data/.config.yaml`` beside ``app.py``, so it runs from a copy under the run's folder and
the user's checkout is never written to.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.interop.process_group import InteropError, ProcessGroup, StartedProcess

# what app.py and the selected providers import (the checkout's pin is used where it has one)
PACKAGES = (
    "websockets", "numpy", "opuslib_next", "pydub", "openai", "httpx", "aiohttp", "aiohttp_cors",
    "ruamel.yaml", "loguru", "requests", "PyJWT", "psutil", "portalocker", "Jinja2", "aioconsole",
    "mcp", "bs4", "markitdown", "cnlunar",
)  # fmt: skip
UNPINNED = ("PyYAML", "cryptography", "onnxruntime")  # imported, not in its requirements.txt
TOP_IGNORE = {"music", "tmp", "data", "performance_tester", "performance_tester.py"}  # not needed, or the run's own
DEEP_IGNORE = {"__pycache__", "SenseVoiceSmall"}  # SenseVoiceSmall: a FunASR model folder, not loaded here


@dataclass(frozen=True, slots=True)
class Services:
    """Where the real server's providers are pointed."""

    llm_url: str  # the relay's base URL (…/v1)
    llm_model: str
    asr_url: str  # …/v1/audio/transcriptions
    tts_url: str  # …/v1/audio/speech
    api_key: str  # the run's throwaway key for the lab's services
    voice: str


def server_folder(checkout: Path) -> Path:
    """The folder holding ``app.py``: the checkout's ``main/xiaozhi-server``, or the checkout itself."""
    if not checkout.exists():
        raise InteropError(f"{checkout}: no such folder (give a checkout of github:xinnan-tech/xiaozhi-esp32-server)")
    for folder in (checkout / "main" / "xiaozhi-server", checkout):
        if (folder / "app.py").is_file() and (folder / "config.yaml").is_file():
            return folder
    raise InteropError(
        f"{checkout}: not a xiaozhi-esp32-server checkout (no main/xiaozhi-server/app.py and config.yaml in it)"
    )


def requirements(folder: Path) -> list[str]:
    """The pip specifiers to install: each package at the checkout's pin where it has one."""
    pins: dict[str, str] = {}
    text = (folder / "requirements.txt").read_text(encoding="utf-8") if (folder / "requirements.txt").exists() else ""
    for line in text.splitlines():
        found = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s#;]+)", line)
        if found:
            pins[_norm(found[1])] = found[2]
    wanted = [f"{name}=={pins[_norm(name)]}" if _norm(name) in pins else name for name in PACKAGES]
    return [*wanted, *UNPINNED]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def ensure_venv(folder: Path, venv: Path, processes: ProcessGroup) -> Path:
    """The venv's python, made and filled once per set of packages (a stamp file remembers which)."""
    wanted = requirements(folder)
    digest = hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:16]
    stamp = venv / ".lab-installed"
    python = venv / "bin" / "python"
    if python.exists() and stamp.exists() and stamp.read_text(encoding="utf-8").strip() == digest:
        return python
    print(f"making the real server's venv at {venv} ({len(wanted)} packages; minutes the first time)", flush=True)
    if not python.exists():
        processes.run("venv", [sys.executable, "-m", "venv", "--clear", str(venv)], timeout_s=300)
    try:
        processes.run("pip-install", [str(python), "-m", "pip", "install", "-q", *wanted], timeout_s=1800)
    except InteropError as exc:
        raise InteropError(f"a provider's package cannot be installed into {venv}: {exc}") from None
    stamp.write_text(digest + "\n", encoding="utf-8")
    return python


def ensure_ffmpeg() -> None:
    """The server refuses to start without ffmpeg (app.py main: check_ffmpeg_installed); Debian's package brings it."""
    if shutil.which("ffmpeg"):
        return
    apt = shutil.which("apt-get")
    sudo_path = shutil.which("sudo")
    sudo = [] if os.geteuid() == 0 else ([sudo_path] if sudo_path else None)
    if apt is None or sudo is None:
        raise InteropError("the real server needs ffmpeg (it checks at start): install it (apt-get install ffmpeg)")
    print("installing ffmpeg (Debian package), which the real server checks for at start", flush=True)
    done = subprocess.run([*sudo, apt, "install", "-y", "-qq", "ffmpeg"], capture_output=True, text=True)
    if done.returncode != 0 or not shutil.which("ffmpeg"):
        raise InteropError(f"ffmpeg could not be installed: {done.stderr.strip()[-300:]}")


def prepare_copy(
    folder: Path, target: Path, services: Services, ws_port: int, http_port: int, vad_wait_ms: int | None = None
) -> Path:
    """A copy of the server folder with its ``data/.config.yaml`` written for this run (``vad_wait_ms``: its
    VAD's ``min_silence_duration_ms``; None keeps the checkout's)."""
    if target.exists():
        shutil.rmtree(target)

    def ignore(where: str, entries: list[str]) -> set[str]:
        top = TOP_IGNORE if Path(where) == folder else set()
        return {e for e in entries if e in top or e in DEEP_IGNORE}

    shutil.copytree(folder, target, ignore=ignore)
    (target / "data").mkdir()
    # JSON is YAML: the server's yaml.safe_load reads it as written
    config = server_config(services, ws_port, http_port, vad_wait_ms)
    (target / "data" / ".config.yaml").write_text(json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8")
    return target


def server_config(s: Services, ws_port: int, http_port: int, vad_wait_ms: int | None = None) -> dict[str, object]:
    """What ``data/.config.yaml`` holds: the server merges it key by key over its ``config.yaml``
    (config_loader.merge_configs), so a VAD wait given here changes that one value and keeps the rest of
    SileroVAD's settings (threshold, model) as shipped."""
    host = "127.0.0.1"
    vad = {} if vad_wait_ms is None else {"VAD": {"SileroVAD": {"min_silence_duration_ms": vad_wait_ms}}}
    return {
        **vad,
        "server": {
            "ip": host,
            "port": ws_port,
            "http_port": http_port,
            "websocket": f"ws://{host}:{ws_port}/xiaozhi/v1/",
            "vision_explain": f"http://{host}:{http_port}/mcp/vision/explain",
            "auth": {"enabled": False},
        },
        "selected_module": {
            "VAD": "SileroVAD",
            "ASR": "OpenaiASR",
            "LLM": "LabLLM",
            "TTS": "OpenAITTS",
            "Memory": "nomem",
            "Intent": "nointent",
        },
        "LLM": {"LabLLM": {"type": "openai", "base_url": s.llm_url, "model_name": s.llm_model, "api_key": s.api_key}},
        "ASR": {
            "OpenaiASR": {
                "type": "openai",
                "api_key": s.api_key,
                "base_url": s.asr_url,
                "model_name": "whisper",
                "output_dir": "tmp/",
            }
        },
        "TTS": {
            "OpenAITTS": {
                "type": "openai",
                "api_key": s.api_key,
                "api_url": s.tts_url,
                "model": "tts-1",
                "voice": s.voice,
                "speed": 1,
                "format": "wav",
                "output_dir": "tmp/",
            }
        },
    }


def start(
    processes: ProcessGroup, python: Path, copy: Path, ws_port: int, name: str, timeout_s: float = 120
) -> StartedProcess:
    """The server, up: its WebSocket port accepts connections. A provider whose package is missing is named."""
    server = processes.start(name, [str(python), "app.py"], cwd=copy)
    try:
        processes.wait_port(server, ws_port, timeout_s=timeout_s)
    except InteropError:
        missing = server.said(r"No module named '([^']+)'")
        if missing is None:
            raise
        raise InteropError(
            f"the real server cannot import {missing[1]!r}: a provider it loads needs a package that "
            f"pipeline/interop/real_server.py does not install (PACKAGES); its log: {server.log}"
        ) from None
    return server
