"""The offline verdict (METHOD M13, condition B'): did anything try to leave the machine?

Reads what the offline run recorded: ``strace -f -k`` of every process in the
network namespace (connects and datagram sends, native libraries included, each
with its stack) and the Python audit log of ``pipeline.offline.guard``. Every attempt
to reach a non-loopback address, or to look up a host name (the resolver's
connect to a name server or to nscd), is attributed to a component: the first
library on the stack that is not the C library or the Python runtime, or for
Python code, the module that asked.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.offline.guard import is_loopback

_CALL = re.compile(
    r"^(?P<pid>\d+)(?:<(?P<comm>[^>]*)>)? (?P<time>\d+\.\d+) "
    r"(?P<call>connect|sendto|sendmsg|sendmmsg|clone3?)\((?P<args>.*)$"
)
_HEAD = re.compile(r"^(?P<pid>\d+)(?:<[^>]*>)? \d+\.\d+ (?P<rest>.*)$")
_RESUMED = re.compile(r"^<\.\.\. \w+ resumed>")
_RESULT = re.compile(r"= (?P<child>\d+)(?:<[^>]*>)?\s*$")
_INET = re.compile(
    r"sa_family=AF_INET6?, sin6?_port=htons\((?P<port>\d+)\).*?"
    r'(?:inet_addr\("(?P<v4>[^"]+)"\)|inet_pton\(AF_INET6, "(?P<v6>[^"]+)")'
)
_UNIX = re.compile(r'sa_family=AF_UNIX, sun_path="(?P<path>[^"]+)"')
_FRAME = re.compile(r"^ > (?P<object>\S+?)(?:\((?P<symbol>[^)]*)\))? \[")
RUNTIME = re.compile(  # libc, the resolver and the Python runtime: never the component that asked
    r"/(libc\.so|libpthread|ld-linux|libresolv|libnss_|libpython|python3\.\d+$|_socket\.|_ssl\.|select\.|"
    r"_asyncio\.|libstdc\+\+|libgcc_s|libcrypto|libssl|_ctypes\.)"
)
NAME_LOOKUP_SOCKETS = ("/var/run/nscd/socket", "/run/nscd/socket", "/run/systemd/resolve/io.systemd.Resolve")


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt to reach beyond loopback: which component, how, where to, and which log saw it."""

    component: str
    process: str
    kind: str  # "connect", "name lookup", "datagram"
    destination: str
    source: str  # "strace" or "audit"
    time: float = 0.0
    pid: int = 0  # the process (thread group), not the thread
    port: str = ""


@dataclass(slots=True)
class Verdict:
    """What the offline run's logs show: the attempts, what could not be read, and why it stays unknown."""

    attempts: list[Attempt] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    unknown_because: list[str] = field(default_factory=list)  # why "no attempt seen" does not prove "fully local"

    @property
    def fully_local(self) -> bool | None:
        """False: something reached out. True: the logs were read cleanly, the replay ran to its end, and
        nothing reached out. None: unknown (what was not recorded or not run was not checked)."""
        if self.attempts:
            return False
        return None if self.unknown_because else True

    @property
    def word(self) -> str:
        return {True: "yes", False: "no", None: "unknown"}[self.fully_local]

    def by_component(self) -> dict[str, list[Attempt]]:
        out: dict[str, list[Attempt]] = {}
        for a in self.attempts:
            out.setdefault(a.component, []).append(a)
        return out

    def text(self) -> str:
        if self.fully_local:
            return "fully local: yes (no process tried to reach beyond loopback or to look up a host name)"
        if self.fully_local is None:
            return "fully local: UNKNOWN (nothing was seen reaching out, but " + "; ".join(self.unknown_because) + ")"
        lines = ["fully local: NO; these components reached out:"]
        for name, attempts in sorted(self.by_component().items()):
            kinds = sorted({f"{a.kind} {a.destination}" for a in attempts})
            processes = sorted({a.process for a in attempts})
            lines.append(
                f"  {name} (process {', '.join(processes)}): {len(attempts)} attempt(s): {'; '.join(kinds[:5])}"
            )
        return "\n".join(lines)


def _component_from_stack(frames: list[str]) -> str:
    """The first library on the stack that is not libc or the Python runtime; "python" if none."""
    for obj in frames:
        if RUNTIME.search(obj):
            continue
        if "/site-packages/" in obj:
            return obj.split("/site-packages/", 1)[1].split("/", 1)[0]
        base = re.sub(r"^lib", "", obj.rsplit("/", 1)[-1])
        return re.split(r"[.-]cpython|\.so", base)[0]
    return "python"


@dataclass(slots=True)
class _Call:
    comm: str
    pid: int
    kind: str
    destination: str
    time: float
    frames: list[str] = field(default_factory=list)

    def attempt(self) -> Attempt:
        component = _component_from_stack(self.frames)
        return Attempt(
            component, f"{self.comm}[{self.pid}]", self.kind, self.destination, "strace", self.time, self.pid
        )


def _outbound(args: str, call: str = "connect") -> tuple[str, str] | None:
    """(kind, destination) when a connect's or a datagram's address leaves loopback or asks for a name lookup."""
    inet = _INET.search(args)
    if inet:
        host = inet.group("v4") or inet.group("v6") or ""
        if is_loopback(host):
            return None
        kind = "name lookup" if inet.group("port") == "53" else ("connect" if call == "connect" else "datagram")
        return kind, f"{host}:{inet.group('port')}"
    unix = _UNIX.search(args)
    if unix and unix.group("path") in NAME_LOOKUP_SOCKETS:
        return "name lookup", unix.group("path")
    return None


def parse_strace(lines: Iterable[str]) -> list[Attempt]:
    """Outbound attempts in an ``strace -f -Y -ttt -k`` log (loopback and local sockets ignored).

    Threads are folded into their process by following ``clone`` calls; a call that
    strace split into "unfinished" and "resumed" keeps the stack printed after it resumed.
    """
    calls: list[_Call] = []
    current: _Call | None = None  # the call the next stack frames belong to
    unfinished: dict[int, _Call] = {}
    group: dict[int, int] = {}  # thread id -> process id
    for line in lines:
        frame = _FRAME.match(line)
        if frame:
            if current is not None:
                current.frames.append(frame.group("object"))
            continue
        current = None
        head = _HEAD.match(line)
        if head is None:
            continue
        tid = int(head.group("pid"))
        if _RESUMED.match(head.group("rest")):
            current = unfinished.pop(tid, None)
            continue
        call = _CALL.match(line)
        if call is None:
            continue
        pid = group.setdefault(tid, tid)
        args = call.group("args")
        if call.group("call").startswith("clone"):
            child = _RESULT.search(args)
            if child:
                group[int(child.group("child"))] = pid if "CLONE_THREAD" in args else int(child.group("child"))
            continue
        out = _outbound(args, call.group("call"))
        if out is None:
            continue
        record = _Call(call.group("comm") or "?", pid, out[0], out[1], float(call.group("time")))
        calls.append(record)
        if "<unfinished ...>" in args:
            unfinished[tid] = record
        else:
            current = record
    return [c.attempt() for c in calls]


def audit_start(lines: Iterable[str]) -> tuple[int, float] | None:
    """(pid, epoch seconds) of the process that wrote the audit log, from its first entry."""
    for line in lines:
        try:
            e = json.loads(line)
            return (int(e["pid"]), float(e["time"])) if e.get("event") == "start" else None
        except (ValueError, KeyError, TypeError):
            return None
    return None


STARTUP = "python start-up (site, .pth or sitecustomize, before the audit hook)"


def parse_audit(lines: Iterable[str], problems: list[str]) -> list[Attempt]:
    attempts = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            e = json.loads(line)
            if e.get("event") == "start":
                continue
            kind = "name lookup" if e["event"] == "socket.getaddrinfo" else e["event"].removeprefix("socket.")
            where = f"{e['host']}:{e['port']}" if e.get("port") is not None else str(e["host"])
            when = float(e.get("time", 0.0))
            port = "" if e.get("port") is None else str(e["port"])
            attempts.append(
                Attempt(str(e["component"]), f"python thread {e['thread']}", kind, where, "audit", when, port=port)
            )
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"audit log line {number}: unreadable ({exc})")
    return attempts


def verdict(strace_log: Path, audit_log: Path, replay_exit_code: int = 0) -> Verdict:
    """Both logs together: native attempts named by library, the replay's Python ones by module.

    Python-level attempts of the replay process (the audit log's writer) are taken from
    the audit log, which names the module; those of any other process stay as strace saw them.
    The verdict fails closed: without both logs read cleanly and a replay that ran to its end,
    seeing no attempt proves nothing, and the verdict is unknown.
    """
    v = Verdict()
    seen: list[Attempt] = []
    if strace_log.is_file() and strace_log.stat().st_size > 0:
        with strace_log.open(encoding="utf-8", errors="replace") as fh:
            seen = parse_strace(fh)
    elif strace_log.is_file():
        v.problems.append(f"{strace_log}: empty strace log: native attempts could not be checked")
        v.unknown_because.append("the strace log is empty")
    else:
        v.problems.append(f"{strace_log}: no strace log: native attempts could not be checked")
        v.unknown_because.append("there is no strace log")
    audit_lines = audit_log.read_text(encoding="utf-8").splitlines() if audit_log.is_file() else []
    unreadable = len(v.problems)
    audit = parse_audit(audit_lines, v.problems)
    if len(v.problems) > unreadable:
        v.unknown_because.append("the audit log has unreadable lines")
    start = audit_start(audit_lines)
    if start is None:
        v.problems.append(f"{audit_log}: no audit log of the replay: its Python attempts could not be checked")
        v.unknown_because.append("the replay's audit log is missing")
    if replay_exit_code != 0:
        v.unknown_because.append(
            f"the replay exited with status {replay_exit_code}, so what it did not run was not checked"
        )
    for a in seen:
        ours = start is not None and a.pid == start[0]
        if a.component != "python" or not ours:
            v.attempts.append(a)
        elif start is not None and a.time < start[1]:
            v.attempts.append(dataclasses.replace(a, component=STARTUP))
        elif not _explained(a, audit):
            v.attempts.append(dataclasses.replace(a, component=NATIVE))
    v.attempts += audit
    return v


NATIVE = "native code (no stack recorded: python -m pipeline.offline --stacks names the library)"
PAIR_S = 5.0  # a Python call and the system call it makes lie this close at most (a slow name lookup included)


def _explained(seen: Attempt, audit: list[Attempt]) -> bool:
    """Whether a system call of the replay process is one the audit log saw Python make (and names)."""
    for a in audit:
        if a.time and abs(a.time - seen.time) > PAIR_S:
            continue
        if seen.kind == "name lookup" and a.kind == "name lookup":
            return True
        port = seen.destination.rsplit(":", 1)[-1]
        same_kind = seen.kind == a.kind or (seen.kind == "datagram" and a.kind == "sendto")
        if same_kind and (not a.port or a.port == port):
            return True
    return False
