"""The tests' sound server: a private PulseAudio daemon with a null sink and its monitor, per test module.

Tests that use it skip, saying why, where pulseaudio or PortAudio is missing (`make test` installs
both: Debian's pulseaudio and libportaudio2, PyPI's sounddevice).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.acoustic.sound import SoundError, sounddevice
from pipeline.acoustic.sound_server import PulseServer, pulseaudio_missing


def sound_missing() -> str | None:
    """Why no sound can be played here, or None."""
    missing = pulseaudio_missing()
    if missing:
        return missing
    try:
        sounddevice()
    except SoundError as exc:
        return str(exc)
    return None


@pytest.fixture(scope="module")
def pulse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulseServer]:
    """A running daemon, its client environment set in this process (and its children); both undone
    after the module's tests."""
    missing = sound_missing()
    if missing:
        pytest.skip(f"no sound server: {missing}")
    runtime: Path = tmp_path_factory.mktemp("pulse")
    with PulseServer(runtime) as server, pytest.MonkeyPatch.context() as env:
        for key, value in server.env.items():
            env.setenv(key, value)
        yield server
    assert server.process is None and server.keeper is None
