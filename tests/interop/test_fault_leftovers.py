"""What a case left behind: a process still running in a session it started (found after its parent is gone),
a port something still listens on or is bound to, a file in its temporary folder."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from pipeline.interop.fault_leftovers import children, held_ports, session_members, temp_left

# a parent that starts a child in its own session and exits: the child is an orphan of that session
ORPHAN = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); print('ok')"


def test_a_process_left_in_the_session_is_found_after_its_parent_ended() -> None:
    parent = subprocess.Popen([sys.executable, "-c", ORPHAN], start_new_session=True, stdout=subprocess.PIPE)
    assert parent.wait(30) == 0
    try:
        left = session_members([parent.pid])
        assert [command for _, command in left] == [f"{sys.executable} -c import time; time.sleep(30)"]
    finally:
        for pid, _ in session_members([parent.pid]):
            subprocess.run(["kill", str(pid)], check=False)
    deadline = time.monotonic() + 10
    while session_members([parent.pid]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert session_members([parent.pid]) == []


def test_children_of_a_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in [pid for pid, _ in children(os.getpid())]
    finally:
        child.kill()
        child.wait()


def test_a_listening_or_bound_port_is_held_and_a_closed_one_is_not() -> None:
    with socket.socket() as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        udp.bind(("127.0.0.1", 0))
        tcp_port, udp_port = tcp.getsockname()[1], udp.getsockname()[1]
        assert held_ports([tcp_port, udp_port, 0]) == sorted([f"tcp {tcp_port}", f"udp {udp_port}"])
    assert held_ports([tcp_port, udp_port]) == []


def test_what_is_left_in_the_temporary_folder(tmp_path: Path) -> None:
    assert temp_left(tmp_path / "none") == []
    (tmp_path / "b").mkdir()
    (tmp_path / "a.wav").write_bytes(b"")
    assert temp_left(tmp_path) == ["a.wav", "b"]
