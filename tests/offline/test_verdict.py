"""The offline verdict: strace and audit logs in, attempts attributed to components."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.offline.isolated_run import TRACED
from pipeline.offline.verdict import NATIVE, STARTUP, Attempt, parse_strace, verdict
from tests.paths import REPO_ROOT, TEST_DATA

DATA = TEST_DATA / "offline"
ROOT = REPO_ROOT


def test_a_native_name_lookup_is_attributed_to_its_library_and_process() -> None:
    attempts = parse_strace((DATA / "native_dns.strace").read_text().splitlines())
    assert attempts == [
        Attempt("onnxruntime", "python[22218]", "name lookup", "10.255.255.53:53", "strace", 1796219512.322335, 22218)
    ]  # the resumed call's stack names the library; the thread folds into its process; loopback is ignored


def write_audit(path: Path, pid: int, start: float, entries: list[dict[str, object]]) -> Path:
    lines = [{"event": "start", "pid": pid, "time": start}, *entries]
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    return path


def strace_line(pid: int, when: float, host: str = "10.255.255.53", port: int = 53) -> str:
    address = f'{{sa_family=AF_INET, sin_port=htons({port}), sin_addr=inet_addr("{host}")}}'
    return f"{pid}<python> {when:.6f} connect(3, {address}, 16) = -1 ENETUNREACH (Network is unreachable)\n"


def test_python_level_attempts_are_named_by_the_audit_log(tmp_path: Path) -> None:
    strace = tmp_path / "s.log"
    strace.write_text(strace_line(100, 5.0) + strace_line(100, 20.0) + strace_line(200, 21.0, "93.184.216.34", 443))
    entry = {"event": "socket.getaddrinfo", "host": "api.x.invalid", "port": 443, "component": "stages.llm_openai",
             "thread": "MainThread"}  # fmt: skip
    v = verdict(strace, write_audit(tmp_path / "a.jsonl", 100, 10.0, [entry]))
    assert not v.fully_local
    assert sorted((a.component, a.destination) for a in v.attempts) == [
        ("python", "93.184.216.34:443"),  # another process: strace is all there is
        (STARTUP, "10.255.255.53:53"),  # before the audit hook was in: interpreter start-up
        (
            "stages.llm_openai",
            "api.x.invalid:443",
        ),  # the replay's own lookup (its strace twin at t=20 folds into it)
    ]


def test_nothing_attempted_is_fully_local(tmp_path: Path) -> None:
    strace = tmp_path / "s.log"
    strace.write_text(strace_line(100, 5.0, "127.0.0.1", 8080))
    v = verdict(strace, write_audit(tmp_path / "a.jsonl", 100, 1.0, []))
    assert v.fully_local and v.text().startswith("fully local: yes")


def test_a_missing_strace_log_is_said_not_assumed_clean(tmp_path: Path) -> None:
    v = verdict(tmp_path / "none.log", write_audit(tmp_path / "a.jsonl", 1, 1.0, []))
    assert v.problems == [f"{tmp_path / 'none.log'}: no strace log: native attempts could not be checked"]


def test_the_audit_hook_names_the_calling_module_and_ignores_loopback(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    code = (
        f"import socket; from pipeline.offline import guard; guard.install(r'{log}')\n"
        "for host in ('localhost', '127.0.0.1', 'lookup.example.invalid'):\n"
        "    try: socket.getaddrinfo(host, 80)\n"
        "    except OSError: pass\n"
        "s = socket.socket(); s.settimeout(0.01)\n"
        "try: s.connect(('192.0.2.1', 9))\n"
        "except OSError: pass\n"
    )
    # inside a network namespace of its own: nothing of this may leave the machine
    subprocess.run(["unshare", "--net", sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
    entries = [json.loads(line) for line in log.read_text().splitlines()][1:]
    assert [(e["event"], e["host"], e["component"]) for e in entries] == [
        ("socket.getaddrinfo", "lookup.example.invalid", "__main__"),
        ("socket.connect", "192.0.2.1", "__main__"),
    ]


# --- the verdict fails closed --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strace_text", "audit", "exit_code", "because"),
    [
        (None, True, 0, "there is no strace log"),
        ("", True, 0, "the strace log is empty"),
        ("x", False, 0, "the replay's audit log is missing"),
        ("x", True, 1, "the replay exited with status 1"),
    ],
)
def test_without_clean_logs_and_a_finished_replay_the_verdict_is_unknown(
    tmp_path: Path, strace_text: str | None, audit: bool, exit_code: int, because: str
) -> None:
    strace = tmp_path / "s.log"
    if strace_text is not None:
        strace.write_text(strace_text and strace_line(100, 5.0, "127.0.0.1", 80))
    audit_log = write_audit(tmp_path / "a.jsonl", 100, 1.0, []) if audit else tmp_path / "none.jsonl"
    v = verdict(strace, audit_log, exit_code)
    assert v.fully_local is None and v.word == "unknown"
    assert any(because in reason for reason in v.unknown_because)
    assert v.text().startswith("fully local: UNKNOWN")


def test_a_datagram_to_a_non_loopback_address_is_an_attempt() -> None:
    address = '{sa_family=AF_INET, sin_port=htons(9), sin_addr=inet_addr("192.0.2.7")}'
    lines = [
        f'7<python> 1.000000 sendto(3<UDP:[0.0.0.0:1234]>, "x", 1, 0, {address}, 16) = -1 ENETUNREACH\n',
        '7<python> 1.100000 sendto(5<UNIX-STREAM:[9]>, "\\0", 1, 0, NULL, 0) = 1\n',  # asyncio's self-pipe
    ]
    [attempt] = parse_strace(lines)
    assert (attempt.kind, attempt.destination) == ("datagram", "192.0.2.7:9")


def test_a_native_datagram_send_is_seen_by_the_offline_trace(tmp_path: Path) -> None:
    """A bare UDP sendto, no connect: the call an earlier trace set never stopped on."""
    code = (
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "try: s.sendto(b'x', ('192.0.2.7', 9))\nexcept OSError: pass\n"
    )
    log = tmp_path / "strace.log"
    traced = ["strace", "-f", "-qq", "-Y", "-ttt", "--seccomp-bpf", "-e", f"trace={TRACED}", "-o", str(log)]
    subprocess.run(["unshare", "--net", *traced, sys.executable, "-c", code], check=True, timeout=60)
    attempts = parse_strace(log.read_text().splitlines())
    assert [(a.kind, a.destination) for a in attempts] == [("datagram", "192.0.2.7:9")]


def test_without_stacks_a_native_attempt_of_the_replay_is_still_an_attempt(tmp_path: Path) -> None:
    strace = tmp_path / "s.log"
    strace.write_text(strace_line(100, 20.0) + strace_line(100, 30.0, "192.0.2.9", 443))
    seen_by_python = {"event": "socket.connect", "host": "192.0.2.9", "port": 443, "component": "stages.x",
                      "thread": "MainThread", "time": 30.001}  # fmt: skip
    v = verdict(strace, write_audit(tmp_path / "a.jsonl", 100, 10.0, [seen_by_python]))
    assert sorted((a.component, a.destination) for a in v.attempts) == [
        (NATIVE, "10.255.255.53:53"),  # a name lookup no Python code made: native code, found without a stack
        ("stages.x", "192.0.2.9:443"),  # its strace twin folds into the module the audit log names
    ]


def test_a_native_lookup_inside_the_replay_process_is_caught_without_stacks(tmp_path: Path) -> None:
    audit, log = tmp_path / "audit.jsonl", tmp_path / "strace.log"
    code = (
        f"from pipeline.offline import guard; guard.install({str(audit)!r})\n"
        "import ctypes; libc = ctypes.CDLL(None); res = ctypes.c_void_p()\n"
        "libc.getaddrinfo(b'native.example.invalid', b'443', None, ctypes.byref(res))  # below the audit hook\n"
    )
    traced = ["strace", "-f", "-qq", "-Y", "-ttt", "--seccomp-bpf", "-e", f"trace={TRACED}", "-o", str(log)]
    subprocess.run(["unshare", "--net", *traced, sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
    v = verdict(log, audit)
    assert v.fully_local is False and {a.component for a in v.attempts} == {NATIVE}, v.attempts
