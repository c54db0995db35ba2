"""scripts/interop/xiaozhi_server.py fails with a message a user can act on, and leaves no process behind.

The real xiaozhi-esp32-server is not in CI (a user's checkout; the note gives the script's run
against it): these tests give the script checkouts that are missing, wrong, broken or
uninstallable, and a port that is taken. ``ffmpeg``, which the real server checks for at start,
is a stand-in script on PATH here; the lab's services run scripted stages so they load at once.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
SCRIPT = ROOT / "scripts" / "interop" / "xiaozhi_server.py"
SERVICES = """
[asr]
impl = "oracle"
[tts]
impl = "stub"
"""


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ffmpeg = bin_dir / "ffmpeg"
    ffmpeg.write_text("#!/bin/sh\necho 'ffmpeg version test-stand-in'\n", encoding="utf-8")
    ffmpeg.chmod(0o755)
    fixtures = tmp_path / "fixtures"
    fixtures.mkdir()
    shutil.copy(ROOT / "audio_fixtures" / "manifest.csv", fixtures / "manifest.csv")
    services = tmp_path / "services.toml"
    services.write_text(SERVICES, encoding="utf-8")
    return {"bin": bin_dir, "fixtures": fixtures, "services": services, "out": tmp_path / "out", "tmp": tmp_path}


def fake_checkout(root: Path, app: str, requirements: str = "") -> Path:
    server = root / "main" / "xiaozhi-server"
    server.mkdir(parents=True)
    (server / "app.py").write_text(app, encoding="utf-8")
    (server / "config.yaml").write_text("server: {}\n", encoding="utf-8")
    (server / "requirements.txt").write_text(requirements, encoding="utf-8")
    return root


def run(setup: dict[str, Path], *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{setup['bin']}{os.pathsep}{os.environ['PATH']}"}
    argv = [sys.executable, str(SCRIPT), *args, "--fixtures", str(setup["fixtures"])]
    argv += ["--services-config", str(setup["services"]), "--out", str(setup["out"]), "--conditions", "A"]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def left_behind(marker: Path) -> list[str]:
    """Command lines of live processes that name ``marker`` (every process the script starts does)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if str(marker) in cmdline or cwd.startswith(str(marker)):
            found.append(cmdline)
    return found


def assert_clear_failure(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("error: ")
    for word in words:
        assert word in done.stderr, done.stderr


def test_a_missing_checkout_is_named(setup: dict[str, Path]) -> None:
    done = run(setup, str(setup["tmp"] / "nowhere"))
    assert_clear_failure(done, "nowhere: no such folder", "xinnan-tech/xiaozhi-esp32-server")


def test_a_folder_that_is_no_checkout_is_named(setup: dict[str, Path]) -> None:
    (setup["tmp"] / "empty").mkdir()
    done = run(setup, str(setup["tmp"] / "empty"))
    assert_clear_failure(done, "not a xiaozhi-esp32-server checkout", "main/xiaozhi-server/app.py")


def test_a_taken_port_is_named(setup: dict[str, Path]) -> None:
    checkout = fake_checkout(setup["tmp"] / "checkout", "raise SystemExit(0)\n")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = run(setup, str(checkout), "--python", sys.executable, "--ports-from", str(port))
    assert_clear_failure(done, f"port {port} is taken")


def test_a_server_that_exits_at_start_is_reported_with_its_log_and_nothing_is_left_running(
    setup: dict[str, Path],
) -> None:
    app = "import sys\nprint('config problem: no LLM configured', flush=True)\nsys.exit(3)\n"
    checkout = fake_checkout(setup["tmp"] / "checkout", app)
    done = run(setup, str(checkout), "--python", sys.executable)
    assert_clear_failure(done, "real-server-A exited with code 3", "config problem: no LLM configured")
    assert left_behind(setup["tmp"]) == []


@pytest.mark.realtime
def test_a_server_that_never_listens_is_stopped_at_the_time_limit(setup: dict[str, Path]) -> None:
    checkout = fake_checkout(setup["tmp"] / "checkout", "import time\nprint('starting', flush=True)\ntime.sleep(600)\n")
    done = run(setup, str(checkout), "--python", sys.executable, "--start-timeout", "3")
    assert_clear_failure(done, "real-server-A did not listen on 127.0.0.1:", "within 3 s", "starting")
    assert left_behind(setup["tmp"]) == []


def test_a_missing_provider_package_is_named(setup: dict[str, Path]) -> None:
    checkout = fake_checkout(setup["tmp"] / "checkout", "import lab_no_such_provider_package\n")
    done = run(setup, str(checkout), "--python", sys.executable)
    assert_clear_failure(done, "cannot import 'lab_no_such_provider_package'", "PACKAGES")
    assert left_behind(setup["tmp"]) == []


@pytest.mark.install
def test_a_package_that_cannot_be_installed_is_named_and_the_venv_left_unstamped(setup: dict[str, Path]) -> None:
    # a pin no registry has: pip fails, which is what a provider whose package cannot be installed looks like
    checkout = fake_checkout(setup["tmp"] / "checkout", "", requirements="websockets==0.0.0.404\n")
    venv = setup["tmp"] / "venv"
    done = run(setup, str(checkout), "--venv", str(venv))
    assert_clear_failure(done, "a provider's package cannot be installed", "websockets==0.0.0.404")
    assert not (venv / ".lab-installed").exists()
    assert left_behind(setup["tmp"]) == []


def test_sigterm_stops_every_process_the_script_started(setup: dict[str, Path]) -> None:
    checkout = fake_checkout(setup["tmp"] / "checkout", "import time\nprint('starting', flush=True)\ntime.sleep(600)\n")
    env = {**os.environ, "PATH": f"{setup['bin']}{os.pathsep}{os.environ['PATH']}"}
    argv = [sys.executable, str(SCRIPT), str(checkout), "--python", sys.executable, "--start-timeout", "300"]
    argv += ["--fixtures", str(setup["fixtures"]), "--services-config", str(setup["services"])]
    argv += ["--out", str(setup["out"]), "--conditions", "A"]
    script = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        log = setup["out"] / "logs" / "real-server-A.log"
        deadline = time.monotonic() + 120
        while not (log.exists() and "starting" in log.read_text(encoding="utf-8")):
            assert time.monotonic() < deadline and script.poll() is None, "the fake server never started"
            time.sleep(0.2)
        assert len(left_behind(setup["tmp"])) >= 3  # the emulated cloud, the speech services, the server
        script.send_signal(signal.SIGTERM)
        _, err = script.communicate(timeout=60)
    finally:
        if script.poll() is None:
            script.kill()
            script.communicate()
    assert script.returncode == 130, err
    assert "every process started was stopped" in err
    assert left_behind(setup["tmp"]) == []
