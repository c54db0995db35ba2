"""Devices held by the lab's server, variant by variant: ``pipeline.capacity`` ramps of ``pipeline.serve``
one after another in one run, printed side by side (issue 32, part 4: the part ``ramp`` of bench_capacity).

What it measures. Each variant (``--variant "NAME=SERVE OPTIONS"``, repeatable) is a fresh
``python -m pipeline.serve FIXTURES --config configs/capacity-server.toml --quiet SERVE OPTIONS`` in its own
process (real Silero VAD and Opus, fixed-latency stand-ins for ASR, LLM and TTS: what is measured is the
server). ``--before REF`` adds a variant, run first, with the first variant's options on the project at git
ref REF (a worktree, removed afterwards): the server's code, fixtures and config from there, the load from
here. Against each server, this checkout's ``python -m pipeline.capacity`` ramps devices (``--steps``, each
step held ``--hold``, every device thinking ``--think`` between questions, a step short of ``--min-turns``
held up to ``--max-hold``), given the server's PID (its CPU) and trace folder (which segment grew first).
Every variant's folders (server/, its log, ramp/ with capacity.json and steps.csv) are under ``--out``.

How to read it. One row per step, one column per variant; a cell is the step's P90 silence (end of speech
-> first audible, ms), its verdict, and the server's CPU in % of one core (over 100 %: more than one core,
its threads or processes). A step **holds** when its P90 is at most the *limit* (the 1-device step's P90,
*baseline P90*, plus the ramp's margin) and no turn failed; **void**: the load generator itself fell behind
(not counted); **too_few**: too few turns for a P90. *devices held* is the last step that held before the
first that failed; "or more" when none failed (the steps ran out first: a lower bound). The variants run
one after another, so the machine can change between them: its load average is printed before and after
each. Every figure comes from the ramp's capacity.json.

``--profile N``: then, per variant, a separate short run with a fresh server: N devices held, and once
they are all connected, ``py-spy record --subprocesses`` of the server for 20 s; its top entries (self and
inclusive, every thread and process: ``labtools.pyspy_top``) are printed after the table.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from labtools.git_worktree import checkout_at
from labtools.pyspy_top import summarise, top_lines
from labtools.report_bench.machine import load_text
from pipeline.capacity.ramp_plan import RampPlan
from pipeline.capacity.step_verdict import baseline_p90
from pipeline.interop.process_group import InteropError, ProcessGroup, free_ports
from pipeline.interop.server_ramps import RampSettings, RampTarget, ramp_argv
from pipeline.records.ramp_result import Capacity, CapacityFileError, Step, read

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_VARIANTS = ("1 process=--downlink-codec firmware", "2 processes=--downlink-codec firmware --processes 2")
BENCH_OWN = ("--port", "--out")  # what the bench gives every server itself
SERVING = r"(?m)^serving (ws://\S+)"  # the server's own line: with --processes, not a child's "[pK] serving"
START_S = 180.0  # a server loads Silero and its stand-ins before it says it serves
# after the stop signal (a server's SIGTERM, a ramp's SIGINT), before it is killed (a --processes parent gives
# its children 30 s)
STOP_S = 60.0
PROFILE_S = 20  # py-spy's recording
PROFILE_RATE = 100  # samples a second
PROFILE_TOP = 8
SETTLE_S = 5.0  # after the profiled devices all connected: their first turns under way
CONNECT_S = 180.0  # for the profiled devices to connect
ESTABLISHED = "01"  # the TCP state in /proc/net/tcp


@dataclass(frozen=True, slots=True)
class Variant:
    """A column: its name, ``pipeline.serve``'s options, and the checkout the server runs from."""

    name: str
    options: tuple[str, ...]
    code: Path = ROOT


@dataclass(frozen=True, slots=True)
class Server:
    """A started server: its URL (from its ``serving`` line), its PID and the folder its traces are under."""

    url: str
    pid: int
    traces: Path


def parse_variant(text: str) -> Variant:
    """``NAME=SERVE OPTIONS`` (the options split as a shell would); an error naming the text if not."""
    name, sep, options = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"--variant {text!r}: NAME=SERVE OPTIONS, e.g. '1 process=--processes 1'")
    try:
        argv = tuple(shlex.split(options))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--variant {text!r}: its options cannot be split ({exc})") from None
    own = [a for a in argv if a.split("=", 1)[0] in BENCH_OWN]
    if own:
        raise argparse.ArgumentTypeError(f"--variant {text!r}: {own[0]} is the bench's own (see --port and --out)")
    return Variant(name.strip(), argv)


def established(tcp_table: str, port: int) -> int:
    """Connections established to local ``port`` in ``/proc/net/tcp``'s text (its header line skipped)."""
    count = 0
    for line in tcp_table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[3] == ESTABLISHED and int(fields[1].rsplit(":", 1)[1], 16) == port:
            count += 1
    return count


def step_cell(step: Step | None) -> str:
    """``P90 verdict (CPU %)``; ``-`` for a step not measured."""
    if step is None:
        return "-"
    p90 = "-" if step.silence_ms.p90 is None else f"{step.silence_ms.p90:.0f}"
    cpu = "" if step.server_cpu_pct is None else f" ({step.server_cpu_pct:.0f}%)"
    return f"{p90} {step.verdict}{cpu}"


def held_cell(found: Capacity) -> str:
    """Devices held, "or more" when no step failed (a lower bound)."""
    if found.devices_held is None:
        return "0"
    return f"{found.devices_held}{' or more' if found.none_failed else ''}"


def limit_cells(found: Capacity) -> tuple[str, str]:
    """The baseline P90 and the highest P90 a step may reach and hold (the ramp's own rule, ``RampPlan.allowed_ms``)."""
    base = baseline_p90(found.steps)
    if base is None:
        return "-", "-"
    plan = RampPlan(tuple(found.steps_planned), found.hold_s, found.max_hold_s, found.margin_pct, found.margin_floor_ms)
    return f"{base:.0f} ms", f"{plan.allowed_ms(base):.0f} ms"


def side_by_side(results: Mapping[str, Capacity | None]) -> list[str]:
    """Rows = steps, columns = variants (``None``: the variant wrote no capacity.json), then the totals."""
    found = {name: c for name, c in results.items() if c is not None}
    counts = sorted({s.devices for c in found.values() for s in c.steps})
    steps = {name: {s.devices: s for s in c.steps} for name, c in found.items()}
    rows = [["devices", *results]]
    rows += [[str(n), *(step_cell(steps[v].get(n)) if v in steps else "-" for v in results)] for n in counts]
    rows.append(["devices held", *(held_cell(found[v]) if v in found else "-" for v in results)])
    limits = {v: limit_cells(c) for v, c in found.items()}
    rows.append(["baseline P90", *(limits[v][0] if v in limits else "-" for v in results)])
    rows.append(["limit", *(limits[v][1] if v in limits else "-" for v in results)])
    widths = [max(len(row[i]) for row in rows) + 2 for i in range(len(rows[0]))]
    return [
        row[0].ljust(widths[0]) + "".join(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)) for row in rows
    ]


def serve_argv(variant: Variant, args: argparse.Namespace, port: int, out: Path) -> list[str]:
    """The server's command line; the fixtures and config are the variant's checkout's when given relative."""
    argv = [sys.executable, "-m", "pipeline.serve", str(args.fixtures), "--config", str(args.config)]
    return [*argv, "--port", str(port), "--out", str(out), "--quiet", *variant.options]


@contextlib.contextmanager
def serving(variant: Variant, args: argparse.Namespace, folder: Path) -> Iterator[Server]:
    """The variant's server from its checkout, once it says it serves; stopped when the ``with`` ends."""
    with ProcessGroup(folder, os.environ) as processes:
        port = args.port or free_ports(1)[0]
        started = processes.start("server", serve_argv(variant, args, port, folder / "server"), cwd=variant.code)
        try:
            found = processes.wait_line(started, SERVING, START_S)
        except InteropError as exc:
            raise SystemExit(f"variant {variant.name!r}: the server did not start: {exc}") from None
        try:
            # the server's whole folder: its traces/, or with --processes each process's processes/K/traces/
            yield Server(found.group(1), started.process.pid, folder / "server")
        finally:
            # SIGTERM to its group, as to every process of an interop run: the server stops as on Ctrl-C (a
            # --processes parent stops its children, each in a session of its own); killed after STOP_S
            processes.stop(started, grace_s=STOP_S)


@contextlib.contextmanager
def running(argv: Sequence[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process of this checkout, its output in ``log``; stopped (SIGINT, then killed) if still running."""
    with log.open("wb") as out:
        unbuffered = {**os.environ, "PYTHONUNBUFFERED": "1"}  # its lines reach the log, and so the screen, as said
        process = subprocess.Popen(list(argv), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=unbuffered)
        try:
            yield process
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(STOP_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def follow(process: subprocess.Popen[bytes], log: Path) -> int:
    """Its log's lines echoed, indented, as they come, until it ends; its exit status."""
    shown = 0
    while True:
        code = process.poll()
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        whole = lines if code is not None else lines[:-1]  # while it runs, a last line may be half written
        for line in whole[shown:]:
            print("    " + line, flush=True)
        shown = max(shown, len(whole))
        if code is not None:
            return code
        time.sleep(0.5)


def ramp_of(args: argparse.Namespace, server: Server, label: str, out: Path, steps: str, hold: str) -> list[str]:
    """This checkout's ``pipeline.capacity`` against ``server``."""
    extra = ("--think", args.think, "--max-hold", args.max_hold, "--min-turns", str(args.min_turns))
    target = RampTarget(server.url, label, server.pid, server.traces)
    return ramp_argv(sys.executable, args.fixtures, target, RampSettings(steps, hold, extra=extra), out)


def measure(variant: Variant, args: argparse.Namespace, folder: Path) -> Capacity | None:
    """The variant's ramp, its load before and after; its capacity.json (None: it wrote none)."""
    command = shlex.join(["pipeline.serve", *variant.options])
    print(f"\n-- {variant.name}: {command} (code: {variant.code}) --")
    print(f"  before: {load_text()}", flush=True)
    with serving(variant, args, folder) as server:
        argv = ramp_of(args, server, variant.name, folder / "ramp", args.steps, args.hold)
        with running(argv, folder / "ramp.log") as ramp:
            code = follow(ramp, folder / "ramp.log")
    print(f"  after: {load_text()}")
    if code:
        print(f"  the ramp ended with exit status {code} (its log: {folder / 'ramp.log'})")
    try:
        return read(folder / "ramp" / "capacity.json")
    except CapacityFileError as exc:
        print(f"  {exc}")
        return None


def profile(variant: Variant, args: argparse.Namespace, folder: Path) -> list[str]:
    """The variant's server profiled at ``--profile`` devices (a run of its own); the top entries."""
    devices = args.profile
    print(f"  profiling {variant.name} at {devices} devices ({load_text()})", flush=True)
    hold = f"{PROFILE_S + 2 * SETTLE_S:g}s"  # py-spy's 20 s inside the hold, with room either side
    settings = argparse.Namespace(**{**vars(args), "max_hold": hold, "min_turns": 1})  # no verdict is wanted
    raw = folder / "profile.raw"
    with serving(variant, args, folder) as server:
        port = urllib.parse.urlsplit(server.url).port or 0
        argv = ramp_of(settings, server, variant.name, folder / "ramp", str(devices), hold)
        with running(argv, folder / "ramp.log") as ramp:
            if not connected(ramp, port, devices):
                return [f"the {devices} devices did not all connect (see {folder / 'ramp.log'}): not profiled"]
            time.sleep(SETTLE_S)
            spy = py_spy(server.pid, raw, folder / "py-spy.log")  # the ramp is then stopped: its figures are not wanted
    if spy:
        return [f"py-spy failed (exit status {spy}; its log: {folder / 'py-spy.log'})"]
    with raw.open(encoding="utf-8", errors="replace") as lines:
        return top_lines(summarise(lines), PROFILE_TOP)


def connected(ramp: subprocess.Popen[bytes], port: int, devices: int) -> bool:
    """Whether ``devices`` connections to ``port`` were established before the ramp ended or ``CONNECT_S``."""
    deadline = time.monotonic() + CONNECT_S
    while ramp.poll() is None and time.monotonic() < deadline:
        if established(Path("/proc/net/tcp").read_text(encoding="ascii"), port) >= devices:
            return True
        time.sleep(0.5)
    return False


def py_spy(pid: int, raw: Path, log: Path) -> int:
    """``py-spy record`` of the process and its children for ``PROFILE_S``; its exit status."""
    exe = Path(sys.executable).parent / "py-spy"
    if not exe.exists():
        raise SystemExit(f"--profile: no py-spy beside {sys.executable} (the dev extra has it)")
    argv = [str(exe), "record", "-p", str(pid), "--subprocesses", "--nonblocking", "-r", str(PROFILE_RATE)]
    argv += ["-d", str(PROFILE_S), "-f", "raw", "-o", str(raw)]
    with running(argv, log) as spy:
        return spy.wait(PROFILE_S + 60)


def variants_of(args: argparse.Namespace, before: Path | None) -> list[Variant]:
    """The variants in the order they run: the ``--before`` one first, then those given."""
    given = args.variant or [parse_variant(v) for v in DEFAULT_VARIANTS]
    first = given[0]
    return [*([Variant(f"{first.name} @ {args.before}", first.options, before)] if before else []), *given]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variant", type=parse_variant, action="append", help='"NAME=SERVE OPTIONS" (repeatable)')
    p.add_argument("--before", metavar="REF", help="add the first variant on the project at git ref REF, run first")
    p.add_argument("--steps", default="1,100,200", help="devices per step, increasing")
    p.add_argument("--hold", default="30s", help="how long each step is held")
    p.add_argument("--think", default="15s", help="a device's pause between an answer and its next question")
    p.add_argument("--max-hold", default="240s", help="the longest hold of a step short of --min-turns")
    p.add_argument("--min-turns", type=int, default=8, help="turns a step needs for its P90")
    p.add_argument(
        "--fixtures", type=Path, default=Path("audio_fixtures"), help="the questions (relative: a checkout's)"
    )
    p.add_argument("--config", type=Path, default=Path("configs/capacity-server.toml"), help="the server's TOML")
    p.add_argument("--out", type=Path, help="a folder of a sub-folder per variant (default: a temporary one)")
    p.add_argument("--profile", type=int, metavar="DEVICES", help="py-spy each variant's server at this many devices")
    p.add_argument("--port", type=int, default=0, help="the servers' port (default: a free one)")
    args = p.parse_args(argv)
    names = [v.name for v in args.variant or []]
    if len(set(names)) != len(names):
        p.error(f"--variant: two variants named alike ({', '.join(names)})")
    if args.profile is not None and args.profile < 1:
        p.error(f"--profile {args.profile}: at least 1 device")
    return args


def run(args: argparse.Namespace, work: Path) -> None:
    """Every variant ramped, the table, then the profiles."""
    with contextlib.ExitStack() as stack:
        before = stack.enter_context(checkout_at(ROOT, args.before, work / "before", "before")) if args.before else None
        variants = variants_of(args, before)
        out = (args.out or work).resolve()  # the servers run from their checkout's folder
        folders = {v.name: out / re.sub(r"[^\w.@-]+", "_", v.name) for v in variants}
        results = {v.name: measure(v, args, folders[v.name]) for v in variants}
        print(f"\n== the lab's server, {args.steps} devices, hold {args.hold}, think {args.think} ==")
        print("P90 silence (ms), the step's verdict, (the server's CPU, % of one core):")
        print("\n".join(side_by_side(results)))
        kept = "" if args.out else ", a temporary folder removed at the end: give --out to keep it"
        print(f"(each variant's capacity.json: {out}/<variant>/ramp/{kept})")
        if args.profile:
            tops = {v.name: profile(v, args, folders[v.name] / "profile") for v in variants}
            for name, lines in tops.items():
                spied = f"py-spy {PROFILE_S} s, all threads and processes"
                print(f"\n== {name}: the server at {args.profile} devices, {spied} ==")
                print("\n".join("  " + line for line in lines))


def stopped(signum: int, frame: object) -> None:
    """SIGTERM ends the bench as Ctrl-C does: on the way out, every process it started is stopped."""
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, stopped)
    print(f"machine: {os.cpu_count()} CPUs, {load_text()}")
    try:
        with tempfile.TemporaryDirectory(prefix="ramp-bench-") as tmp:
            run(args, Path(tmp))
    except KeyboardInterrupt:
        print("interrupted: every server and ramp it started was stopped", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
