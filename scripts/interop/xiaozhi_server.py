"""Measure a real xiaozhi-esp32-server (and the xiaozhi MQTT gateway) beside the lab's own server.

    python scripts/interop/xiaozhi_server.py CHECKOUT [--gateway GATEWAY_CHECKOUT] \\
        [--fixtures audio_fixtures] [--limit 6] [--rounds 2] [--conditions A,B] [--out DIR]

CHECKOUT is a checkout of github:xinnan-tech/xiaozhi-esp32-server; GATEWAY_CHECKOUT one of
github:xinnan-tech/xiaozhi-mqtt-gateway. For each condition (A: the emulated cloud LLM; B:
llama.cpp's server with the local model) the script starts the lab's speech services (ASR and
TTS as OpenAI-compatible endpoints, plus a relay that times the LLM), then in turn: the real
server with its providers pointed at them, and ``pipeline.serve`` on the same services; the
device emulator (``pipeline.replay --server``) asks each the fixtures' questions, over
WebSocket and, with ``--gateway``, through the real MQTT gateway (MQTT + UDP). Everything
runs on 127.0.0.1 (the gateway binds every interface: see pipeline/interop/gateway.py), and
every process started is stopped, however the script ends.

With ``--capacity STEPS`` (capacity mode) each server is ramped by ``python -m pipeline.capacity``
instead, on the fixed-latency stand-ins of ``configs/capacity-services.toml`` (condition A only),
and the output is ``capacity.md`` (devices held side by side) and each ramp's folder under
``capacity/`` (``pipeline/interop/capacity_mode.py``, ``ramp.py``, ``ramp_table.py``).

With ``--vad-waits 200,500,800`` (turns mode: ``turns_mode.py``) the real server runs at each wait of its VAD
(``min_silence_duration_ms``; the shipped one first), the lab's at the first; ``turns.md`` scores every run against
the fixtures' truth: users cut off, silence from their true end (``pipeline/report/cutoffs_by_run.py``).

Output under --out: ``interop.md`` (the side-by-side table), ``segments.csv`` (every turn's
segments), ``runs/`` (each run's traces and bench.csv), ``services/`` (the services' spans),
``logs/`` (every process's output). The real server runs in a venv of its own (--venv),
filled once with only what its selected providers import.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.analysis.server_segments import read_segments, summarize
from pipeline.analysis.traces import trace_files
from pipeline.endpoints.llama_server import LlamaServer, LlamaServerError
from pipeline.interop import gateway as real_gateway
from pipeline.interop import real_server
from pipeline.interop.capacity_mode import CapacityRun, capacity_intro, fixtures_without
from pipeline.interop.lab_server import lab_config
from pipeline.interop.process_group import InteropError, ProcessGroup, StartedProcess, free_ports, run_script
from pipeline.interop.ramp_table import ramp_markdown
from pipeline.interop.server_ramps import EndedRamp, ProcessCpu, RampSettings, RampTarget, passed_on, ramp_argv
from pipeline.interop.side_by_side import RunResult, interop_intro, markdown, packets
from pipeline.interop.turns_mode import LAB, REAL, TurnsOptions, planned, settle, turns_intro, turns_problem, turns_runs
from pipeline.records.segment import write_segments
from pipeline.report.cutoffs_by_run import score_run, turns_markdown
from pipeline.settings.models import ModelError, default_cache, resolve

ROOT = Path(__file__).resolve().parents[2]

SERVICES_CONFIG = ROOT / "configs" / "interop-services.toml"
CAPACITY_SERVICES = ROOT / "configs" / "capacity-services.toml"
LOCAL_MODEL = "qwen2.5-coder-0.5b"
UPSTREAM_KEY_ENV = "LAB_INTEROP_UPSTREAM_KEY"  # the llama-server's key, handed to the relay by name only


@dataclass(frozen=True, slots=True)
class Run:
    """One emulator run against a server: its label, condition, output folder, and what went wrong."""

    label: str
    condition: str
    folder: Path
    note: str


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkout", type=Path, help="a checkout of github:xinnan-tech/xiaozhi-esp32-server")
    p.add_argument("--gateway", type=Path, help="a checkout of github:xinnan-tech/xiaozhi-mqtt-gateway")
    p.add_argument("--fixtures", type=Path, default=ROOT / "audio_fixtures")
    p.add_argument("--limit", type=int, default=6, help="the first N questions")
    p.add_argument("--rounds", type=int, default=2, help="rounds over them (the first is a warm-up)")
    p.add_argument(
        "--conditions", help="A (emulated cloud LLM), B (local llama.cpp), or both (default A,B; with --capacity, A)"
    )
    p.add_argument("--out", type=Path, help="default: experiments/interop-TIME")
    p.add_argument("--venv", type=Path, help="the real server's venv (default: ~/.cache/voice-latency-lab/...)")
    p.add_argument("--python", type=Path, help="run the real server with this interpreter instead (no venv made)")
    p.add_argument(
        "--services-config", type=Path, help=f"the speech services' [asr] [tts] (default {SERVICES_CONFIG.name}; "
        f"with --capacity, the fixed-latency stand-ins of {CAPACITY_SERVICES.name})",
    )  # fmt: skip
    p.add_argument("--ports-from", type=int, default=0, help="use ports N, N+1, ... (default: any free ones)")
    p.add_argument("--no-lab", action="store_true", help="measure the real server only")
    p.add_argument("--start-timeout", type=float, default=120, help="seconds the real server has to come up")
    capacity_arguments(p)
    turns_arguments(p)
    args = p.parse_args(argv)
    args.turns = TurnsOptions(
        args.vad_waits, args.lab_vad_waits, bool(args.capacity), args.gateway is not None, not args.no_lab,
        args.fixtures, args.limit, args.rounds,
    )  # fmt: skip
    args.conditions = args.conditions or ("A" if args.capacity else "A,B")
    args.services_config = args.services_config or (CAPACITY_SERVICES if args.capacity else SERVICES_CONFIG)
    bad = sorted(set(args.conditions.split(",")) - {"A", "B"})
    if bad or turns_problem(args.turns):
        p.error(turns_problem(args.turns) or f"--conditions: unknown {', '.join(bad)} (A or B)")
    return args


class Interop:
    """One invocation: its folders, ports and processes."""

    def __init__(self, args: argparse.Namespace, env: Mapping[str, str]) -> None:
        self.args, self.env = args, dict(env)
        self.out: Path = args.out or ROOT / "experiments" / time.strftime("interop-%Y%m%d-%H%M%S")
        self.python = sys.executable
        cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "voice-latency-lab"
        self.venv: Path = args.venv or cache / "xiaozhi-server-venv"
        self.runs: list[Run] = []
        self.ramps: list[EndedRamp] = []
        # capacity mode's stand-ins: the services' oracle ASR hears which fixture question each upload is
        self.hear_fixtures = bool(args.capacity)
        self.fixtures: Path = args.fixtures  # the questions asked (capacity mode may leave some out: --exclude)
        self.metered: dict[str, int] = {}  # the run's processes whose CPU a ramp records, by role
        names = ("speech", "cloud", "real_ws", "real_http", "lab_ws", "mqtt", "udp", "admin")
        self.ports = dict(zip(names, free_ports(len(names), args.ports_from), strict=True))
        self.server_folder = real_server.server_folder(args.checkout.resolve())
        self.gateway_folder = real_gateway.gateway_folder(args.gateway.resolve()) if args.gateway else None
        self.plan = planned(args.turns, self.server_folder)  # the servers to ask; in turns mode, one a VAD wait

    # --- the whole run ---------------------------------------------------------------------

    def main(self) -> list[RunResult]:
        if not (self.args.fixtures / "manifest.csv").is_file():
            raise InteropError(f"{self.args.fixtures}: no manifest.csv (give the fixtures folder)")
        self.out.mkdir(parents=True, exist_ok=True)
        if self.args.exclude:
            self.fixtures = fixtures_without(self.args.fixtures, self.args.exclude, self.out / "fixtures")
        with ProcessGroup(self.out / "logs", self.env) as processes:
            real_server.ensure_ffmpeg()
            python = self.args.python or real_server.ensure_venv(self.server_folder, self.venv, processes)
            try:
                for condition in self.args.conditions.split(","):
                    with self.llm(condition, processes) as (upstream, model, key):
                        services = self.services(condition, upstream, key, processes)
                        try:
                            base = f"http://127.0.0.1:{self.ports['speech']}/v1"
                            self.measure(condition, base, model, python, processes)
                        finally:
                            processes.stop(services)
            except BaseException:
                if self.runs or self.ramps:  # what was measured before the failure is written all the same
                    self.build()
                raise
        return self.build()

    @contextmanager
    def llm(self, condition: str, processes: ProcessGroup) -> Iterator[tuple[str, str, str]]:
        """The condition's LLM endpoint: (base URL, model name, key)."""
        if condition == "A":
            port = self.ports["cloud"]
            argv = [self.python, "-m", "pipeline.endpoints.cloud", "--port", str(port)]
            argv += ["--profile", self.args.cloud_profile]
            cloud = processes.start("cloud-A", [*argv, "--answers", str(self.args.fixtures / "manifest.csv")])
            processes.wait_line(cloud, r"emulated cloud, profile [^:]+: (http\S+)", timeout_s=60)
            self.metered["cloud"] = cloud.process.pid
            try:
                yield f"http://127.0.0.1:{port}/v1", "emulated-cloud", ""
            finally:
                processes.stop(cloud)
            return
        try:
            model = resolve(LOCAL_MODEL, default_cache(self.env))
        except ModelError as exc:
            raise InteropError(f"condition B needs the local model: {exc}") from None
        print(f"condition B: starting llama-server with {model.name}", flush=True)
        try:
            with LlamaServer(model, threads=os.cpu_count() or 2, n_ctx=8192, seed=1234).start(timeout_s=180) as llama:
                yield llama.base_url, LOCAL_MODEL, llama.api_key
        except LlamaServerError as exc:
            raise InteropError(f"llama-server: {exc}") from None

    def services(self, condition: str, upstream: str, key: str, processes: ProcessGroup) -> StartedProcess:
        """The speech services and LLM relay for one condition, listening."""
        port = self.ports["speech"]
        argv = [self.python, "-m", "pipeline.endpoints.speech", "--config", str(self.args.services_config)]
        argv += ["--port", str(port), "--out", str(self.out / "services" / condition)]
        argv += ["--run-id", f"services-{condition}", "--llm-upstream", upstream]
        if self.hear_fixtures:  # the oracle ASR hears the fixture question each upload is (heard.py)
            argv += ["--fixtures", str(self.args.fixtures)]
        if key:
            argv += ["--llm-upstream-key-env", UPSTREAM_KEY_ENV]
        started = processes.start(f"services-{condition}", argv, env={UPSTREAM_KEY_ENV: key} if key else None)
        processes.wait_line(started, r"speech services listening on (\S+)", timeout_s=300)
        self.metered["services"] = started.process.pid
        return started

    def measure(self, condition: str, base: str, model: str, python: Path, processes: ProcessGroup) -> None:
        asr, tts = f"{base}/audio/transcriptions", f"{base}/audio/speech"
        services = real_server.Services(base, model, asr, tts, api_key="lab-loopback", voice="lab")
        for run in self.plan:  # each server once; in turns mode, once per VAD wait
            name, tagged = run.server, condition + run.tag
            ws = f"ws://127.0.0.1:{self.ports['real_ws' if name == REAL else 'lab_ws']}/xiaozhi/v1/"
            if name == REAL:
                copy = real_server.prepare_copy(
                    self.server_folder, self.out / f"xiaozhi-server-{tagged}", services,
                    self.ports["real_ws"], self.ports["real_http"], run.wait_ms,
                )  # fmt: skip
                server = real_server.start(
                    processes, python, copy, self.ports["real_ws"], f"real-server-{tagged}", self.args.start_timeout
                )
            else:
                server = self.start_lab(tagged, lab_config(condition, base, asr, tts, model, run.wait_ms), processes)
            self.metered["server"] = server.process.pid
            try:
                self.ask(run.label(condition), condition, ws, processes)
                # capacity mode ramps the lab's server over WebSocket only: its own MQTT front is another run
                if self.gateway_folder is not None and not (self.args.capacity and name == LAB):
                    self.through_gateway(
                        f"{name} via MQTT gateway, {condition}", condition, ws, self.gateway_folder, processes
                    )
            finally:
                processes.stop(server)

    def start_lab(self, condition: str, settings: str, processes: ProcessGroup) -> StartedProcess:
        config = self.out / f"lab-{condition}.toml"
        config.write_text(settings, encoding="utf-8")
        argv = [self.python, "-m", "pipeline.serve", str(self.fixtures), "--config", str(config)]
        argv += ["--port", str(self.ports["lab_ws"]), "--out", str(self.out / "serve" / condition), "--quiet"]
        started = processes.start(f"lab-server-{condition}", argv)
        processes.wait_port(started, self.ports["lab_ws"], timeout_s=300)
        return started

    def through_gateway(self, label: str, condition: str, ws: str, folder: Path, processes: ProcessGroup) -> None:
        ports = real_gateway.GatewayPorts(self.ports["mqtt"], self.ports["udp"], self.ports["admin"])
        key = real_gateway.signature_key()
        name = "mqtt-gateway-" + label.split(" via ")[0].replace(" ", "-") + f"-{condition}"
        # a server tells the gateway's connections from a device's by this query (xiaozhi-esp32-server
        # core/connection.py:228; its docs/mqtt-gateway-integration.md:10-14 has users add it)
        chat_server = f"{ws}?from=mqtt_gateway"
        copy = real_gateway.prepare_copy(folder, self.out / name, chat_server, ports, key, processes)
        gateway = real_gateway.start(processes, copy, ports, name)
        self.metered["gateway"] = gateway.process.pid
        try:
            self.ask(label, condition, f"mqtt://127.0.0.1:{ports.mqtt}", processes, {"MQTT_SIGNATURE_KEY": key})
        finally:
            processes.stop(gateway)
            del self.metered["gateway"]

    def ask(
        self, label: str, condition: str, server: str, processes: ProcessGroup, env: Mapping[str, str] | None = None
    ) -> None:
        """The server's measurement: the questions asked one at a time, or in capacity mode a ramp."""
        if self.args.capacity:
            self.ramp(label, condition, server, processes, env)
        else:
            self.replay(label, condition, server, processes, env)

    def ramp(
        self, label: str, condition: str, server: str, processes: ProcessGroup, env: Mapping[str, str] | None
    ) -> None:
        folder = self.out / "capacity" / label.replace(", ", "-").replace(" ", "-")
        a = self.args
        given = {"--min-turns": a.min_turns, "--max-hold": a.max_hold, "--think": a.think}
        extra = passed_on({**given, "--soak": a.soak, "--window": a.window})
        settings = RampSettings(self.args.capacity, self.args.hold, self.args.margin, self.args.profile, extra)
        # the lab's server writes spans of its own, from which the ramp tells which part of the silence grew first
        traces = self.out / "serve" / condition / "traces" if label.startswith("lab server") else None
        target = RampTarget(server, label, self.metered["server"], traces)
        argv = ramp_argv(self.python, self.fixtures, target, settings, folder)
        held = f"held {a.soak} (a soak)" if a.soak else f"each step held {a.hold}"
        print(f"{label}: ramping {a.capacity} device(s), {held}", flush=True)
        meter = ProcessCpu(dict(self.metered))
        meter.start(time.monotonic())
        started = processes.start(f"capacity-{folder.name}", argv, env=env)
        code = started.process.wait()
        cpu = meter.stop(time.monotonic())
        processes.stop(started)
        self.ramps.append(
            EndedRamp(label, folder, started.log.read_text(encoding="utf-8", errors="replace"), code, cpu)
        )

    def replay(
        self, label: str, condition: str, server: str, processes: ProcessGroup, env: Mapping[str, str] | None = None
    ) -> None:
        folder = self.out / "runs" / label.replace(", ", "-").replace(" ", "-")
        argv = [self.python, "-m", "pipeline.replay", str(self.fixtures), "--server", server]
        argv += ["--condition", condition, "--limit", str(self.args.limit), "--rounds", str(self.args.rounds)]
        argv += ["--out", str(folder), "--run-id", folder.name, "--timeout", "120", *settle(self.args.turns)]
        print(f"{label}: {self.args.limit} question(s) x {self.args.rounds} round(s) against {server}", flush=True)
        started = processes.start(f"replay-{folder.name}", argv, env=env)
        code = started.process.wait()
        processes.stop(started)
        note = "" if code == 0 else f"the emulator exited with code {code}; its log: {started.log}"
        self.runs.append(Run(label, condition, folder, note))

    # --- the report --------------------------------------------------------------------------

    def build(self) -> list[RunResult]:
        if self.args.capacity:
            text = ramp_markdown(self.ramps, capacity_intro(capacity_run(self.args), self.fixtures))
            (self.out / "capacity.md").write_text(text, encoding="utf-8")
            return []
        problems: list[str] = []
        results, rows_by_run = [], []
        for run in self.runs:
            services = trace_files(self.out / "services" / run.condition / "traces")
            rows, found = read_segments(trace_files(run.folder / "traces"), services)
            problems += found
            rows_by_run.append((run.label, rows))
            lost, late = packets(run.folder / "bench.csv")
            results.append(RunResult(run.label, run.condition, summarize(rows), lost, late, run.note))
        write_segments(self.out / "segments.csv", rows_by_run)
        table = markdown(results)
        head = interop_intro(self.args.fixtures.name, self.args.limit, self.args.rounds)
        (self.out / "interop.md").write_text(head + table, encoding="utf-8")
        if self.args.vad_waits:  # turns mode: each run's turns against the truth
            scores = [score_run(*r) for r in turns_runs(self.plan, self.runs, self.out)]
            text = turns_markdown(scores, turns_intro(self.args.turns, self.server_folder))
            (self.out / "turns.md").write_text(text, encoding="utf-8")
        for message in problems:
            print(f"warning: {message}", file=sys.stderr)
        return results


def capacity_arguments(p: argparse.ArgumentParser) -> None:
    """The capacity mode's options, added to the script's parser."""
    group = p.add_argument_group("capacity mode (a ramp of devices against each server, by pipeline.capacity)")
    group.add_argument("--capacity", metavar="STEPS", default="", help="device counts, e.g. 1,2,5,10,20,50")
    group.add_argument("--hold", default="30s", help="how long each step is held (pipeline.capacity --hold)")
    group.add_argument("--margin", default="", help="pipeline.capacity --margin (default: its own)")
    group.add_argument("--profile", type=Path, help="a load profile for pipeline.capacity --profile")
    group.add_argument("--min-turns", type=int, help="pipeline.capacity --min-turns (default: its own)")
    group.add_argument("--max-hold", help="pipeline.capacity --max-hold: a step's longest hold short of --min-turns")
    group.add_argument("--cloud-profile", default="fast-70b-api", help="the emulated cloud's compute profile")
    group.add_argument("--think", help="pipeline.capacity --think: a device's pause between an answer and a question")
    group.add_argument("--soak", metavar="DURATION", help="hold the one step --capacity names this long (e.g. 20m)")
    group.add_argument("--window", help="with --soak: each window's length (pipeline.capacity's default, 5m)")
    group.add_argument(
        "--exclude",
        default="",
        metavar="IDS",
        help="question ids left out of the fixtures every server is asked (comma-separated)",
    )


def turns_arguments(p: argparse.ArgumentParser) -> None:
    """The turns mode's options (``pipeline/interop/turns_mode.py`` checks them: ``turns_problem``)."""
    group = p.add_argument_group("turns mode (each server at several VAD waits, scored against the fixtures' truth)")
    group.add_argument(
        "--vad-waits",
        metavar="MS,...",
        help="the real server's VAD.SileroVAD.min_silence_duration_ms, "
        "one run each; the first is the reference (e.g. 200,500,800 with the shipped 200 first)",
    )
    group.add_argument("--lab-vad-waits", metavar="MS,...", help="of those, the waits the lab's server runs at too "
                       "([vad.xiaozhi_server] silence_ms; default: the first)")  # fmt: skip


def capacity_run(args: argparse.Namespace) -> CapacityRun:
    return CapacityRun(
        args.capacity, args.hold, args.margin, args.profile, args.fixtures, args.exclude, args.services_config,
        args.cloud_profile, args.min_turns,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    return run_script(lambda: measure(args))


def measure(args: argparse.Namespace) -> int:
    interop = Interop(args, os.environ)
    results = interop.main()
    print()
    if args.capacity:
        print((interop.out / "capacity.md").read_text(encoding="utf-8"))
        print(f"written: {interop.out / 'capacity.md'}, each ramp under {interop.out / 'capacity'}")
        return 0 if interop.ramps and all(r.code == 0 for r in interop.ramps) else 1
    print((interop.out / "interop.md").read_text(encoding="utf-8"))
    print(f"written: {interop.out / 'interop.md'}, {interop.out / 'segments.csv'}")
    if args.vad_waits:
        print(f"\n{(interop.out / 'turns.md').read_text(encoding='utf-8')}written: {interop.out / 'turns.md'}")
    return 0 if all(r.summary.ok == r.summary.turns for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
