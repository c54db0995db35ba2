"""The stand-ins a fault case's server talks to, started and listening: the emulated cloud (the LLM) and the
lab's speech services (the oracle ASR that hears which fixture question an upload is, the stub TTS). The lab's
server and the real one are given the same ones (``fault_run``, ``fault_real``)."""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.interop.process_group import ProcessGroup, StartedProcess

FIXTURES = "audio_fixtures"  # relative to the repository, the processes' working folder
SPEECH_SERVICES = "configs/capacity-services.toml"
CLOUD_PROFILE = "fast-70b-api"
LISTEN_S = 120.0


def cloud(group: ProcessGroup, port: int, root: Path) -> StartedProcess:
    """The emulated cloud on ``port``, answering the fixture questions."""
    argv = [sys.executable, "-m", "pipeline.endpoints.cloud", "--port", str(port), "--profile", CLOUD_PROFILE]
    started = group.start("cloud", [*argv, "--answers", f"{FIXTURES}/manifest.csv"], cwd=root)
    group.wait_port(started, port, LISTEN_S)
    return started


def speech(group: ProcessGroup, port: int, folder: Path, root: Path) -> StartedProcess:
    """The speech services on ``port``, their spans under ``folder/speech``."""
    argv = [sys.executable, "-m", "pipeline.endpoints.speech", "--config", SPEECH_SERVICES, "--port", str(port)]
    started = group.start("speech", [*argv, "--out", str(folder / "speech"), "--fixtures", FIXTURES], cwd=root)
    group.wait_port(started, port, LISTEN_S)
    return started
