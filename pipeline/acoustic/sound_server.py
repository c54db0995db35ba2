"""A private PulseAudio sound server with one virtual speaker: a null sink and its monitor source.

For the tests and the bench on machines without a sound card: whatever is played into the sink
can be recorded from ``<sink>.monitor`` as from a microphone beside the speaker. The daemon runs
in the foreground as our child (no systemd, no D-Bus, root allowed) in its own runtime folder,
with the native protocol on a socket there: nothing outside that folder is touched, and clients
reach it by ``PULSE_SERVER`` (PortAudio through ALSA's ``pulse`` device, Debian's
libasound2-plugins, which the pulseaudio package depends on).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # the daemon's own tools, as Debian puts them


class SoundServerError(RuntimeError):
    """The daemon is not installed, or did not come up: says which, with its own words."""


def pulseaudio_missing() -> str | None:
    """Why no server can start here (pulseaudio or pactl not installed), or None."""
    for tool, package in (("pulseaudio", "pulseaudio"), ("pactl", "pulseaudio-utils")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package {package}; `make test` installs it)"
    return None


class PulseServer:
    """``with PulseServer(folder) as server``: a daemon with the null sink ``sink`` at ``sample_rate``,
    mono; ``server.env`` is what a client needs in its environment (its caller sets it)."""

    def __init__(self, runtime: Path, sink: str = "lab_sink", sample_rate: int = 16000) -> None:
        self.runtime, self.sink, self.sample_rate = runtime, sink, sample_rate
        self.socket = runtime / "native"
        self.process: subprocess.Popen[bytes] | None = None
        self.keeper: subprocess.Popen[bytes] | None = None

    @property
    def monitor(self) -> str:
        return f"{self.sink}.monitor"

    @property
    def env(self) -> dict[str, str]:
        return {"PULSE_SERVER": f"unix:{self.socket}", "PULSE_SINK": self.sink, "PULSE_SOURCE": self.monitor}

    def _daemon_env(self) -> dict[str, str]:
        """Everything the daemon reads or writes is under the runtime folder (not the caller's home)."""
        home = str(self.runtime)
        private = {"HOME": home, "XDG_RUNTIME_DIR": home, "XDG_CONFIG_HOME": home, "XDG_STATE_HOME": home}
        return {"PATH": PATH, **private, "PULSE_RUNTIME_PATH": f"{home}/run", "PULSE_STATE_PATH": f"{home}/state"}

    def command(self) -> list[str]:
        sink = f"module-null-sink sink_name={self.sink} rate={self.sample_rate} channels=1"
        return [
            *("pulseaudio", "-n", "--daemonize=no", "--system=no", "--exit-idle-time=-1", "--use-pid-file=no"),
            *("--realtime=no", "--high-priority=no", "--log-target=stderr", "--log-level=error"),
            f"--load=module-native-protocol-unix socket={self.socket} auth-anonymous=1",
            f"--load={sink}",
        ]

    def start(self, timeout_s: float = 15.0) -> PulseServer:
        missing = pulseaudio_missing()
        if missing:
            raise SoundServerError(missing)
        self.runtime.mkdir(parents=True, exist_ok=True)
        self.log = self.runtime / "pulseaudio.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                self.command(), env=self._daemon_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout_s
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                said = self.log.read_text(errors="replace").strip()
                self.stop()
                raise SoundServerError(f"pulseaudio did not start within {timeout_s:g} s: {said or 'it said nothing'}")
            time.sleep(0.05)
        self._keep_awake()
        return self

    def _keep_awake(self) -> None:
        """A silent stream into the sink for the daemon's life. An idle null sink sleeps up to two
        seconds between renders (module-null-sink.c's BLOCK_USEC, cited); a stream that joins it waits
        out that sleep, and the sink's other streams lose that much (seen here: 0.6 s gone from the
        monitor as a speaker opened)."""
        rate = f"--rate={self.sample_rate}"
        command = ["pacat", "--playback", "--raw", "--format=s16le", rate, "--channels=1", "--latency-msec=20"]
        self.keeper = subprocess.Popen(
            [*command, f"--device={self.sink}", "/dev/zero"],
            env={**self._daemon_env(), **self.env},
            stderr=subprocess.DEVNULL,
        )
        time.sleep(2.5)  # the idle sink's last long sleep, waited out here once

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        env = {**self._daemon_env(), **self.env}
        done = subprocess.run(["pactl", "list", "short", "sinks"], env=env, capture_output=True, text=True, timeout=10)
        return done.returncode == 0 and self.sink in done.stdout

    def stop(self) -> None:
        if self.keeper is not None:
            self.keeper.terminate()
            self.keeper.wait(timeout=10)
            self.keeper = None
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def __enter__(self) -> PulseServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
