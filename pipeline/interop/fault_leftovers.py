"""What a fault case left behind once its processes were asked to stop: processes still running in the sessions
it started, ports still held, files in its temporary folder.

Every process a case starts runs in a session of its own (``ProcessGroup``), so whatever it started in turn
(a server's workers, a restarted worker) is found by its session id in ``/proc``, even when its parent is
gone. A port is held while a socket listens on it (TCP) or is bound to it (UDP), read from ``/proc/net``
(the network namespace's own view, so a case run in one sees its own ports); a connection waiting out
TIME_WAIT holds nothing. Each process is given the case's own ``TMPDIR``, which must be empty at the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

PROC = Path("/proc")
TCP_LISTEN = "0A"  # include/net/tcp_states.h: TCP_LISTEN


def _live(proc: Path) -> Iterator[tuple[int, list[str], Path]]:
    """(pid, its stat fields after the name, its folder) of each live process (zombies left out: they hold
    nothing but their exit status)."""
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            text = (pid_dir / "stat").read_text()
        except OSError:
            continue
        # the command name (field 2) is in parentheses and may hold spaces: the fields after it split safely
        fields = text[text.rfind(")") + 2 :].split()  # state (3), ppid (4), pgrp (5), session (6)
        if fields and fields[0] != "Z":
            yield int(pid_dir.name), fields, pid_dir


def _command(pid_dir: Path) -> str:
    try:
        return (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def session_members(sessions: Iterable[int], proc: Path = PROC) -> list[tuple[int, str]]:
    """(pid, command line) of each live process whose session id is one of ``sessions``."""
    wanted = set(sessions)
    return sorted((pid, _command(d)) for pid, fields, d in _live(proc) if int(fields[3]) in wanted)


def children(pid: int, proc: Path = PROC) -> list[tuple[int, str]]:
    """(pid, command line) of each live child of ``pid``."""
    return sorted((child, _command(d)) for child, fields, d in _live(proc) if int(fields[1]) == pid)


def held_ports(ports: Iterable[int], proc: Path = PROC) -> list[str]:
    """Each of ``ports`` that a socket still listens on (TCP) or is bound to (UDP), as ``tcp 8765``."""
    wanted = {p for p in ports if p}
    held: set[tuple[str, int]] = set()
    for kind in ("tcp", "tcp6", "udp", "udp6"):
        try:
            lines = (proc / "net" / kind).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            port = int(fields[1].rsplit(":", 1)[1], 16)
            if port in wanted and (kind.startswith("udp") or fields[3] == TCP_LISTEN):
                held.add((kind.rstrip("6"), port))
    return [f"{kind} {port}" for kind, port in sorted(held)]


def temp_left(folder: Path) -> list[str]:
    """What is left in a case's temporary folder (names relative to it, at most 10)."""
    if not folder.is_dir():
        return []
    return sorted(str(p.relative_to(folder)) for p in folder.iterdir())[:10]
