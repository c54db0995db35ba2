"""Running one fault case on this machine: the server, the endpoints it needs, the device, the fault, the checks.

The case's folder holds everything: ``server/`` (and ``server-2/`` for a restart), ``device/`` (its bench.csv
and traces), ``logs/`` (each process's output), ``tmp/`` (every process's ``TMPDIR``) and the extra settings
it wrote. Once the device ends (or is stopped at the case's bound, ``limit_s``), each process still running is sent
SIGTERM alone, as an operator would, and given ``STOP_GRACE_S``; then what is still running in their sessions,
which ports are still held and what is left in ``tmp/`` is what was left behind. The process group then stops
whatever remains, so a case never leaves anything on the machine, whatever it records.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import msgspec

from pipeline.analysis.read import read_traces
from pipeline.analysis.traces import trace_files
from pipeline.interop import fault_endpoints as stand_ins
from pipeline.interop.fault_inject import INJECT, CaseStage
from pipeline.interop.fault_kinds import FaultCase
from pipeline.interop.fault_ledger import error_kind, ledger, planned, traces_agree
from pipeline.interop.fault_leftovers import held_ports, session_members, temp_left
from pipeline.interop.fault_proxy import MODES, FaultProxy
from pipeline.interop.fault_real import RealSide, fixtures_of, real_side, server_said
from pipeline.interop.fault_result import CaseResult
from pipeline.interop.process_group import InteropError, ProcessGroup, StartedProcess, free_ports
from pipeline.records.bench_csv import read_bench_csv
from pipeline.records.turn_row import TurnRow
from pipeline.settings.fixtures import load_questions

FIXTURES = stand_ins.FIXTURES  # these two relative to the repository (the processes' working folder)
SIMULATOR = "configs/simulator.toml"
STOP_GRACE_S = 35.0  # past the server's own stop limit (processes.STOP_LIMIT_S, 30 s): its last turns written
ERROR_LINE = re.compile(r"error|fail|disconnect|reconnect|lost|refused|timed? ?out|traceback|cannot|gone", re.I)


def _tomls(case: FaultCase, endpoint_port: int) -> str:
    """The settings a case adds over the simulator's: its turn timeout, its endpoint behind the fault proxy."""
    text = f"[run]\nturn_timeout_s = {case.turn_timeout_s:g}\n" if case.turn_timeout_s else ""
    if case.fault == "llm":
        text += '[llm]\nimpl = "openai"\nmodel = "emulated-cloud"\ntools = false\n'
        text += f'[cloud]\nbase_url = "http://127.0.0.1:{endpoint_port}/v1"\nread_timeout_s = 30\n'
    if case.fault == "speech":
        text += f'[asr]\nimpl = "service"\nurl = "http://127.0.0.1:{endpoint_port}/v1/audio/transcriptions"\n'
    return text


def _endpoint(case: FaultCase, group: ProcessGroup, folder: Path, port: int, root: Path) -> StartedProcess:
    """The emulated cloud or the speech services, listening on ``port``."""
    return stand_ins.cloud(group, port, root) if case.fault == "llm" else stand_ins.speech(group, port, folder, root)


def _mount_disk(case: FaultCase, where: Path, stack: contextlib.ExitStack, keep: Path) -> None:
    """A tmpfs of ``disk_kib`` at ``where`` (inside the case's mount namespace); at the end what it holds is
    copied to ``keep`` and it is unmounted."""
    where.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={case.disk_kib}k", "tmpfs", str(where)], check=True)
    stack.callback(subprocess.run, ["umount", "-l", str(where)], check=False)
    stack.callback(shutil.copytree, where, keep, dirs_exist_ok=True)


def _server_argv(case: FaultCase, configs: Sequence[str], ports: Sequence[int], out: Path) -> list[str]:
    argv = [sys.executable, "-m", "pipeline.serve", FIXTURES]
    for config in configs:
        argv += ["--config", config]
    argv += ["--port", str(ports[0]), "--out", str(out)]
    if case.processes > 1:
        argv += ["--processes", str(case.processes)]
    if case.transport == "mqtt":
        argv += ["--mqtt-port", str(ports[1]), "--udp-port", str(ports[2])]
    return argv


def _lab_url(case: FaultCase, ports: Sequence[int]) -> str:
    """Where the device reaches the lab's server: its MQTT port, or its WebSocket."""
    return f"mqtt://127.0.0.1:{ports[1]}" if case.transport == "mqtt" else f"ws://127.0.0.1:{ports[0]}/xiaozhi/v1/"


def _device_argv(case: FaultCase, url: str, out: Path, fixtures: Path) -> list[str]:
    argv = [sys.executable, "-m", "pipeline.replay", str(fixtures), "--config", SIMULATOR, "--server", url]
    argv += ["--out", str(out), "--limit", str(case.limit), "--rounds", str(case.rounds)]
    if case.devices > 1:
        argv += ["--devices", str(case.devices)]
    if case.link_profile:
        argv += ["--link-profile", case.link_profile]
    return argv


def stop_alone(started: StartedProcess, grace_s: float = STOP_GRACE_S) -> str:
    """SIGTERM to the process alone (not its session: what it started must stop with it), and how it ended."""
    process = started.process
    if process.poll() is not None:
        return f"{started.name} had ended (exit {process.returncode})"
    process.terminate()
    try:
        return f"{started.name} stopped on SIGTERM (exit {process.wait(grace_s)})"
    except subprocess.TimeoutExpired:
        return f"{started.name} still running {grace_s:g} s after SIGTERM"


def device_saw(log: Path, most: int = 5) -> list[str]:
    """The device's lines that say something went wrong, each once with its count (numbers folded for the
    count, the first instance shown)."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    said = [line.strip() for line in lines if ERROR_LINE.search(line) and "first_token_ms" not in line]
    first: dict[str, str] = {}
    counts: Counter[str] = Counter()
    for line in said:
        folded = re.sub(r"\d+(\.\d+)?", "#", re.sub(r"^\[[\d/]+\]\s*", "", line))
        first.setdefault(folded, line)
        counts[folded] += 1
    return [f"{first[k][:160]} (x{n})" for k, n in counts.most_common(most)]


def _failures(folder: Path) -> str:
    """A server folder's failed rows by error, as " (failed: 2 LlmHttpError)" ("" when none failed)."""
    bench = folder / "bench.csv"
    failed = Counter(error_kind(r) for r in (read_bench_csv(bench) if bench.is_file() else []) if not r.ok)
    return " (failed: " + ", ".join(f"{n} {e}" for e, n in failed.most_common()) + ")" if failed else ""


def with_causes(rows: Sequence[TurnRow], device: Path, servers: Sequence[Path]) -> list[TurnRow]:
    """The device's rows, each whose server side failed naming why (``server_error``): the device's traces
    read beside every server folder's, joined by the ``traceparent`` as ``pipeline.analyze`` joins them."""
    files = [f for folder in (device, *servers) if (folder / "traces").is_dir() for f in trace_files(folder / "traces")]
    if not servers or not files:
        return list(rows)
    causes = {r.trace_id: r.server_error for r in read_traces(files, workers=1).rows if r.server_error}
    return [msgspec.structs.replace(r, server_error=causes[r.trace_id]) if r.trace_id in causes else r for r in rows]


def records_agree(folder: Path) -> str:
    """A folder's bench.csv against the rows its traces recompute, in a line."""
    bench = folder / "bench.csv"
    rows = read_bench_csv(bench) if bench.is_file() else []
    read = read_traces(trace_files(folder / "traces"), workers=1) if (folder / "traces").is_dir() else None
    traced = read.rows if read is not None else []
    differs = traces_agree(rows, traced)
    said = f"same {len(rows)} rows" if not differs else f"DIFFER: {differs}"
    if read is not None and read.problems:
        said += f"; {len(read.problems)} unreadable trace line(s): {read.problems[0][:120]}"
    return said


def run_here(case: FaultCase, out: Path, environment: Mapping[str, str], root: Path) -> CaseResult:
    """Run ``case`` on this machine (in its namespace already, when it needs one), its folder ``out/NAME``;
    ``root``: the repository (its fixtures and configs; the processes' working folder)."""
    folder = out.resolve() / case.name
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "tmp").mkdir(parents=True)
    result = CaseResult(case.name, case.title, load=[round(os.getloadavg()[0], 2)])
    try:
        _run(case, folder, {**environment, "TMPDIR": str(folder / "tmp")}, root, result)
    except (InteropError, OSError, subprocess.CalledProcessError) as exc:
        result.status = f"failed: {str(exc).splitlines()[0]}"
    _check(case, folder, root, result)
    result.load.append(round(os.getloadavg()[0], 2))
    return result


def _run(case: FaultCase, folder: Path, env: Mapping[str, str], root: Path, result: CaseResult) -> None:
    if case.mode and case.mode not in MODES:
        raise InteropError(f"{case.name}: mode {case.mode!r}; choose one of {', '.join(MODES)}")
    with contextlib.ExitStack() as stack:
        group = stack.enter_context(ProcessGroup(folder / "logs", env))
        ports = free_ports(4)
        if case.server == "real":
            four = (ports[0], ports[1], ports[2], ports[3])  # its WebSocket and HTTP, the cloud, the speech services
            side, proxy, endpoints = real_side(case, group, folder, four, root, stack)
            start_server = _real_starter(side, group, result)
            url, env_of_device = side.device_url, side.device_env
        else:
            proxy, endpoints, start_server = _lab_side(case, group, folder, ports, root, stack, result)
            url, env_of_device = _lab_url(case, ports), {}
        stage = CaseStage(case, folder, group, ports[0], start_server, proxy=proxy)
        stage.servers.append(start_server("server"))
        if case.server != "real":  # the real server's start returns once it listens
            group.wait_line(stage.servers[0], r"serving ws://", 120)
        device_argv = _device_argv(case, url, folder / "device", fixtures_of(case, folder, root))
        result.commands.append(shlex.join(device_argv))
        stage.started_ns = time.time_ns()
        stage.device = group.start("device", device_argv, cwd=root, env=env_of_device)
        try:
            INJECT[case.fault](stage)
            _wait_device(stage, result)
        finally:
            result.events, result.fault_ns = stage.events, stage.fault_ns
        _stop_and_look(stage, endpoints, ports, folder, result)


def _real_starter(side: RealSide, group: ProcessGroup, result: CaseResult) -> Callable[[str], StartedProcess]:
    """How to start the real server (again): its command kept, listening once it returns."""

    def start_server(name: str) -> StartedProcess:
        result.commands.append(f"(cd {shlex.quote(str(side.copy))} && {shlex.quote(str(side.python))} app.py)")
        return side.start(group, name)

    return start_server


def _lab_side(
    case: FaultCase,
    group: ProcessGroup,
    folder: Path,
    ports: Sequence[int],
    root: Path,
    stack: contextlib.ExitStack,
    result: CaseResult,
) -> tuple[FaultProxy | None, list[StartedProcess], Callable[[str], StartedProcess]]:
    """The lab's server of one case: its endpoint behind the case's proxy, and how to start it (again)."""
    configs, endpoints = [SIMULATOR], []
    proxy = None
    if case.fault in ("llm", "speech"):
        endpoints.append(_endpoint(case, group, folder, ports[3], root))
        proxy = stack.enter_context(FaultProxy(ports[3]))
    if extra := _tomls(case, proxy.port if proxy is not None else 0):
        (folder / "fault.toml").write_text(extra, encoding="utf-8")
        configs.append(str(folder / "fault.toml"))
    disk = folder / "server-disk"
    if case.disk_kib:
        _mount_disk(case, disk, stack, folder / "server")

    def start_server(name: str) -> StartedProcess:
        where = disk if case.disk_kib else folder / name
        argv = _server_argv(case, configs, ports, where)
        result.commands.append(shlex.join(argv))
        return group.start(name, argv, cwd=root)

    return proxy, endpoints, start_server


def _wait_device(stage: CaseStage, result: CaseResult) -> None:
    assert stage.device is not None
    left = stage.case.limit_s - (time.time_ns() - stage.started_ns) / 1e9
    try:
        result.device_exit = stage.device.process.wait(max(1.0, left))
        stage.said(f"the device ended (exit {result.device_exit})")
    except subprocess.TimeoutExpired:
        late = f"the device was still running {stage.case.limit_s:g} s after its start (the case's bound); "
        stage.said(late + stop_alone(stage.device, 30))
        result.device_exit = stage.device.process.poll()
    result.device_s = round((time.time_ns() - stage.started_ns) / 1e9, 1)


def _stop_and_look(
    stage: CaseStage, endpoints: Sequence[StartedProcess], ports: Sequence[int], folder: Path, result: CaseResult
) -> None:
    everyone = [*stage.servers, *endpoints, *([stage.device] if stage.device else [])]
    for started in [*reversed(stage.servers), *endpoints]:
        stage.said(stop_alone(started))
    left = session_members(p.process.pid for p in everyone)
    result.left_behind = [f"process {pid}: {command[:100]}" for pid, command in left]
    result.left_behind += [f"{held} still held" for held in held_ports(ports)]
    result.left_behind += [f"temp {name}" for name in temp_left(folder / "tmp")]


def _check(case: FaultCase, folder: Path, root: Path, result: CaseResult) -> None:
    """The ledger of the device's rows, bench.csv against its traces, each server folder's records, the
    device's error lines."""
    device = folder / "device"
    bench = device / "bench.csv"
    rows = read_bench_csv(bench) if bench.is_file() else []
    servers = sorted(p.parent for p in folder.glob("server*/**/bench.csv") if "server-disk" not in p.parts)
    fixtures = folder / "fixtures" if case.server == "real" else root / FIXTURES  # as fixtures_of made them
    questions = [q.id for q in load_questions(fixtures).questions[: case.limit]] if fixtures.is_dir() else []
    plan = planned(questions, case.rounds, case.devices)
    result.ledger = ledger(plan, with_causes(rows, device, servers), result.fault_ns)
    result.analyze = records_agree(device)
    result.server_records = [f"{p.relative_to(folder)}: {records_agree(p)}{_failures(p)}" for p in servers]
    if case.server == "real":
        result.server_records = server_said(folder / "logs")
    result.device_saw = device_saw(folder / "logs" / "device.log")
