"""Measure a Pipecat voice bot (pipecat-ai from PyPI) as the lab measures the real xiaozhi server.

    python scripts/interop/pipecat_bot.py [--wire twilio|pipecat] [--limit 6] [--rounds 2] [--out DIR]
    python scripts/interop/pipecat_bot.py --capacity 1,2,5,10,20 [--hold 60s] [--beside CAPACITY_DIR ...]

Pipecat is installed once into an environment of its own (--venv; ``PIPECAT_REQUIREMENTS``, pinned), never the
lab's. The script starts the emulated cloud LLM (condition A), the lab's speech services (OpenAI-compatible ASR and
TTS, and the relay that times the LLM) and the bot (``scripts/interop/pipecat_app.py``: Silero VAD, Smart Turn v3,
OpenAI STT / LLM / TTS pointed at the services; Twilio's serializer with its hang-up off, or its own), all on
127.0.0.1; then the lab's caller asks the bot the fixtures' questions, one call, one question after another, over
Twilio Media Streams (``--wire twilio``, the default: ``pipeline.replay --server twilio+ws://...``) or Pipecat's own
protobuf wire with its RTVI messages (``--wire pipecat``: ``pipecat+ws://...``); and every process started is
stopped, however the script ends.

Turns mode (the default) writes ``pipecat.md``: the run's turns (silence and whole turn, the answer's edges inferred
from the sound), the bot's own marks beside what the caller heard (``pipeline/interop/bot_marks.py``: from the bot's
log on Twilio's wire, which tells none; from its RTVI messages on its own), and the offline check: the bot runs
under strace, and every connect or datagram it tried outside loopback is listed (``pipeline/offline/verdict.py``'s
reading of the log). Onnxruntime's telemetry is turned off (``ORT_DISABLE_TELEMETRY=1``) and the check says whether
that held.

Capacity mode (``--capacity STEPS``) ramps the bot with ``python -m pipeline.capacity`` on the fixed-latency
stand-ins (``configs/capacity-services.toml``), the bot's CPU and RSS per step by its PID, and writes
``capacity.md``; ``--beside`` adds ramps already made of other servers (``xiaozhi_server.py --capacity``'s
``capacity/*`` folders) to its side-by-side table. The bot is not under strace there: a ptrace stop on every send
would be measured as the bot's own cost.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.analysis.numbers import quantile
from pipeline.analysis.read import rows_from_spans
from pipeline.analysis.traces import ReadProblems, read_trace_file, trace_files
from pipeline.interop.bot_lag import lag_markdown, read_lags, step_lags
from pipeline.interop.bot_marks import beside, heard_turns, markdown, read_marks, told_marks
from pipeline.interop.capacity_mode import fixtures_without
from pipeline.interop.process_group import InteropError, ProcessGroup, StartedProcess, free_ports, run_script
from pipeline.interop.ramp_table import ramp_markdown
from pipeline.interop.server_ramps import EndedRamp, ProcessCpu, RampSettings, RampTarget, passed_on, ramp_argv
from pipeline.offline.isolated_run import TRACED
from pipeline.offline.verdict import parse_strace
from pipeline.records.ramp_result import CapacityFileError
from pipeline.records.ramp_result import read as read_capacity
from pipeline.report.silence import sorted_silences
from pipeline.settings.fixtures import load_questions

ROOT = Path(__file__).resolve().parents[2]
APP = Path(__file__).resolve().parent / "pipecat_app.py"
SERVICES_CONFIG = ROOT / "configs" / "interop-services.toml"
CAPACITY_SERVICES = ROOT / "configs" / "capacity-services.toml"
# what was measured here (pipecat-ai 1.14.0 from PyPI, 2026-12): pinned, so a later release is another experiment
PIPECAT_REQUIREMENTS = ("pipecat-ai[silero,openai,websocket]==1.14.0", "fastapi==0.165.0", "uvicorn==0.55.0")
WIRES = {"twilio": "/media", "pipecat": "/ws"}  # the bot's WebSocket for each wire (pipecat_app.py)
BOT_ENV = {"ORT_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1"}


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fixtures", type=Path, default=ROOT / "audio_fixtures")
    p.add_argument("--wire", choices=tuple(WIRES), default="twilio", help="how the bot is called (default twilio)")
    p.add_argument("--limit", type=int, default=6, help="the first N questions")
    p.add_argument("--rounds", type=int, default=2, help="rounds over them (the first is a warm-up)")
    p.add_argument("--out", type=Path, help="default: experiments/pipecat-TIME")
    p.add_argument("--venv", type=Path, help="Pipecat's venv (default: ~/.cache/voice-latency-lab/pipecat-venv)")
    p.add_argument("--services-config", type=Path, help=f"the speech services' [asr] [tts] (default "
                   f"{SERVICES_CONFIG.name}; with --capacity, the stand-ins of {CAPACITY_SERVICES.name})")  # fmt: skip
    p.add_argument("--cloud-profile", default="fast-70b-api", help="the emulated cloud's compute profile")
    p.add_argument("--language", default="en", help="the bot's language: outside a ramp, only the fixtures' "
                   "questions in it are asked (Pipecat's OpenAI STT sends one language with each request)")  # fmt: skip
    p.add_argument("--ports-from", type=int, default=0, help="use ports N, N+1, ... (default: any free ones)")
    p.add_argument("--start-timeout", type=float, default=120, help="seconds the bot has to come up")
    group = p.add_argument_group("capacity mode (a ramp of calls against the bot, by pipeline.capacity)")
    group.add_argument("--capacity", metavar="STEPS", default="", help="call counts, e.g. 1,2,5,10,20")
    group.add_argument("--hold", default="30s", help="how long each step is held (pipeline.capacity --hold)")
    group.add_argument("--margin", default="", help="pipeline.capacity --margin (default: its own)")
    group.add_argument("--min-turns", type=int, help="pipeline.capacity --min-turns")
    group.add_argument("--max-hold", help="pipeline.capacity --max-hold")
    group.add_argument("--think", help="pipeline.capacity --think: a caller's pause between an answer and a question")
    group.add_argument("--beside", type=Path, nargs="*", default=[], help="other servers' capacity folders")
    group.add_argument("--exclude", default="", metavar="IDS", help="question ids left out of the ramp, as "
                       "xiaozhi_server.py --exclude leaves them out of every server's")  # fmt: skip
    args = p.parse_args(argv)
    args.services_config = args.services_config or (CAPACITY_SERVICES if args.capacity else SERVICES_CONFIG)
    return args


def ensure_venv(venv: Path, processes: ProcessGroup) -> Path:
    """Pipecat's venv's python, made and filled once per set of requirements (a stamp file remembers which)."""
    digest = hashlib.sha256("\n".join(PIPECAT_REQUIREMENTS).encode()).hexdigest()[:16]
    stamp, python = venv / ".lab-installed", venv / "bin" / "python"
    if python.exists() and stamp.exists() and stamp.read_text(encoding="utf-8").strip() == digest:
        return python
    print(f"making Pipecat's venv at {venv} ({', '.join(PIPECAT_REQUIREMENTS)})", flush=True)
    if not python.exists():
        processes.run("venv", [sys.executable, "-m", "venv", "--clear", str(venv)], timeout_s=300)
    processes.run("pip-install", [str(python), "-m", "pip", "install", "-q", *PIPECAT_REQUIREMENTS], timeout_s=1800)
    stamp.write_text(digest + "\n", encoding="utf-8")
    return python


class PipecatRun:
    """One invocation: its folders, ports and processes."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out or ROOT / "experiments" / time.strftime("pipecat-%Y%m%d-%H%M%S")
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "voice-latency-lab"
        self.venv: Path = args.venv or cache / "pipecat-venv"
        self.ports = dict(zip(("cloud", "speech", "bot"), free_ports(3, args.ports_from), strict=True))
        self.metered: dict[str, int] = {}
        self.strace_log = self.out / "logs" / "bot-strace.log"
        self.fixtures: Path = args.fixtures  # the questions asked: those in the bot's language
        self.code = 1  # the script's exit code: 0 once every measured turn was answered, or the ramp ended well

    def main(self) -> str:
        if not (self.args.fixtures / "manifest.csv").is_file():
            raise InteropError(f"{self.args.fixtures}: no manifest.csv (give the fixtures folder)")
        self.out.mkdir(parents=True, exist_ok=True)
        self.fixtures = self.asked(self.out / "fixtures")
        with ProcessGroup(self.out / "logs", os.environ) as processes:
            python = ensure_venv(self.venv, processes)
            self.start_services(processes)
            traced = not self.args.capacity
            bot = self.start_bot(python, processes, traced)
            url = f"{self.args.wire}+ws://127.0.0.1:{self.ports['bot']}{WIRES[self.args.wire]}"
            try:
                if self.args.capacity:
                    return self.ramp(url, processes)
                return self.replay(url, processes, bot)
            finally:
                processes.stop(bot)

    def asked(self, target: Path) -> Path:
        """The questions asked: in a ramp, the fixtures less ``--exclude`` (the stand-ins' oracle hears any language,
        so every server is ramped on the same questions); else those in the bot's language, which its real STT is
        told."""
        if self.args.capacity:
            return (
                fixtures_without(self.args.fixtures, self.args.exclude, target)
                if self.args.exclude
                else self.args.fixtures
            )
        return in_language(self.args.fixtures, self.args.language, target)

    def start_services(self, processes: ProcessGroup) -> None:
        """The emulated cloud and the speech services with the LLM relay in front of it, listening."""
        py, fixtures = sys.executable, str(self.fixtures)
        argv = [py, "-m", "pipeline.endpoints.cloud", "--port", str(self.ports["cloud"])]
        cloud = processes.start(
            "cloud", [*argv, "--profile", self.args.cloud_profile, "--answers", f"{fixtures}/manifest.csv"]
        )
        processes.wait_line(cloud, r"emulated cloud, profile [^:]+: (http\S+)", timeout_s=60)
        argv = [py, "-m", "pipeline.endpoints.speech", "--config", str(self.args.services_config)]
        argv += ["--port", str(self.ports["speech"]), "--out", str(self.out / "services"), "--run-id", "services"]
        argv += ["--llm-upstream", f"http://127.0.0.1:{self.ports['cloud']}/v1"]
        argv += ["--fixtures", fixtures]  # an oracle ASR (the stand-ins') hears the fixture question each upload is
        services = processes.start("services", argv)
        processes.wait_line(services, r"speech services listening on (\S+)", timeout_s=300)
        self.metered |= {"cloud": cloud.process.pid, "services": services.process.pid}

    def start_bot(self, python: Path, processes: ProcessGroup, traced: bool) -> StartedProcess:
        argv = [str(python), str(APP), "--port", str(self.ports["bot"])]
        argv += ["--base-url", f"http://127.0.0.1:{self.ports['speech']}/v1", "--events", str(self.events)]
        argv += ["--language", self.args.language]
        if traced:  # every connect and datagram of the bot and its threads, for the offline check
            if shutil.which("strace") is None:
                raise InteropError("the offline check runs the bot under strace: install it (apt-get install strace)")
            self.strace_log.unlink(missing_ok=True)
            argv = ["strace", "-f", "-qq", "-Y", "-ttt", "--seccomp-bpf", "-e", f"trace={TRACED}",
                    "-o", str(self.strace_log), "--", *argv]  # fmt: skip
        self.events.unlink(missing_ok=True)
        bot = processes.start("pipecat-bot", argv, env=BOT_ENV)
        processes.wait_line(bot, r"pipecat bot listening on (ws://\S+)", timeout_s=self.args.start_timeout)
        self.metered["server"] = bot_pid(bot) if traced else bot.process.pid
        return bot

    @property
    def events(self) -> Path:
        return self.out / "bot-events.jsonl"

    def replay(self, url: str, processes: ProcessGroup, bot: StartedProcess) -> str:
        a, folder = self.args, self.out / "runs" / f"pipecat-{self.args.wire}"
        argv = [sys.executable, "-m", "pipeline.replay", str(self.fixtures), "--server", url, "--condition", "A"]
        argv += ["--limit", str(a.limit), "--rounds", str(a.rounds), "--out", str(folder), "--run-id", folder.name]
        print(f"pipecat bot: {a.limit} question(s) x {a.rounds} round(s) on the {a.wire} wire", flush=True)
        started = processes.start("replay", [*argv, "--timeout", "120"])
        code = started.process.wait()
        processes.stop(started)
        processes.stop(bot)  # its log is whole once it is gone
        text = self.turns_markdown(folder, code)
        (self.out / "pipecat.md").write_text(text, encoding="utf-8")
        return text

    def turns_markdown(self, folder: Path, code: int) -> str:
        spans = [s for f in trace_files(folder / "traces") for s in read_trace_file(f, ReadProblems())]
        rows = rows_from_spans(spans)  # the traces read once: the rows and the turns' marks both from them
        measured = [r for r in rows if not r.warmup]
        silences = sorted_silences(r for r in measured if r.ok)
        whole = sorted(r.whole_turn_ms for r in measured if r.ok and r.whole_turn_ms is not None)
        problems: list[str] = []
        told = told_marks(spans) if self.args.wire == "pipecat" else read_marks(self.events, problems)
        marks = beside(heard_turns(spans, ReadProblems()), told)
        source = "its RTVI messages, as the caller received them" if self.args.wire == "pipecat" else "its log"
        self.code = 0 if code == 0 and measured and all(r.ok for r in measured) else 1
        lines = [
            f"# A Pipecat bot, called on the {self.args.wire} wire",
            "",
            f"pipecat-ai from PyPI ({', '.join(PIPECAT_REQUIREMENTS)}), bot `{APP.relative_to(ROOT)}`; "
            f"services `{self.args.services_config.name}`, emulated cloud `{self.args.cloud_profile}` (estimated). "
            f"Fixtures {self.args.fixtures.name}, the questions in `{self.args.language}`: {self.args.limit} x "
            f"{self.args.rounds} round(s), the first a warm-up. "
            "The answer's edges are inferred from its sound (the lab's caller, as a phone's playout plays it).",
            "",
            f"- turns answered: {sum(r.ok for r in measured)} of {len(measured)} measured "
            f"({sum(r.ok for r in rows)} of {len(rows)} with the warm-up); the replay exited with {code}",
            f"- silence (end of speech -> first audible), median / P90: {_pct(silences, 50)} / {_pct(silences, 90)} ms",
            f"- whole turn, median: {_pct(whole, 50)} ms",
            f"- offline: {self.offline()}",
            "",
            markdown(marks, f"pipecat bot, {self.args.wire} wire", source),
            f"Rows: `{folder / 'bench.csv'}`; traces: `{folder / 'traces'}`; the bot's marks: `{self.events}`.",
        ]
        lines += [f"- unread: {p}" for p in problems]
        return "\n".join(lines) + "\n"

    def offline(self) -> str:
        """What the bot tried outside loopback while it ran, from its strace log."""
        if not self.strace_log.is_file():
            return "not checked (no strace log)"
        with self.strace_log.open(encoding="utf-8", errors="replace") as log:
            attempts = parse_strace(log)
        if not attempts:
            return "no connect or datagram outside loopback by the bot or any of its threads (strace)"
        seen = sorted({f"{a.kind} {a.destination} ({a.process})" for a in attempts})
        return f"{len(attempts)} attempt(s) outside loopback: " + "; ".join(seen[:10])

    def ramp(self, url: str, processes: ProcessGroup) -> str:
        a, folder = self.args, self.out / "capacity" / f"pipecat-{self.args.wire}"
        extra = passed_on({"--min-turns": a.min_turns, "--max-hold": a.max_hold, "--think": a.think})
        settings = RampSettings(a.capacity, a.hold, a.margin, None, extra)
        target = RampTarget(url, f"pipecat bot ({a.wire})", self.metered["server"], None)
        argv = ramp_argv(sys.executable, self.fixtures, target, settings, folder)
        print(f"pipecat bot: ramping {a.capacity} call(s), each step held {a.hold}", flush=True)
        meter = ProcessCpu(dict(self.metered))
        meter.start(time.monotonic())
        started = processes.start("capacity", argv)
        code = started.process.wait()
        cpu = meter.stop(time.monotonic())
        processes.stop(started)
        ramps = [EndedRamp(target.label, folder, started.log.read_text(encoding="utf-8", errors="replace"), code, cpu)]
        self.code = code
        ramps += [earlier(path) for path in a.beside]
        intro = (
            "# How many calls does a Pipecat bot hold?\n\n"
            f"`python -m pipeline.capacity` at {a.capacity} call(s), each step held {a.hold}, on the stand-ins of "
            f"{a.services_config.name} and the emulated cloud ({a.cloud_profile}, estimated). The CPU columns are "
            f"each process's mean over the whole ramp, percent of one core ({os.cpu_count()} cores here).\n\n"
        )
        problems: list[str] = []
        lags = step_lags(folder, read_lags(self.events, problems), problems)
        text = ramp_markdown(ramps, intro) + "\n" + lag_markdown(target.label, lags)
        text += "".join(f"- unread: {p}\n" for p in problems)
        (self.out / "capacity.md").write_text(text, encoding="utf-8")
        return text


def in_language(folder: Path, language: str, target: Path) -> Path:
    """The fixtures' questions in ``language`` only (the others left out, as ``--exclude`` leaves them)."""
    questions = load_questions(folder, "").questions
    others = [q.id for q in questions if q.language != language]
    if len(others) == len(questions):
        raise InteropError(f"{folder}: no question in {language!r}")
    return fixtures_without(folder, ",".join(others), target) if others else folder


def earlier(folder: Path) -> EndedRamp:
    """Another server's ramp, already made: its label, what it held and what grew first, from its capacity.json."""
    try:
        found = read_capacity(folder / "capacity.json")
    except CapacityFileError as exc:
        raise InteropError(f"--beside {folder}: {exc}") from None
    held = "none" if found.devices_held is None else str(found.devices_held)
    held += " or more (no step failed)" if found.none_failed else ""
    said = f"devices held: {held}\n" + (f"grew first: {found.grew_first}\n" if found.grew_first else "")
    return EndedRamp(found.label or folder.name, folder, said, 0, {})  # its CPU columns are in its own capacity.md


def bot_pid(traced: StartedProcess) -> int:
    """The bot's PID under strace (strace's child), for its CPU and RSS; strace's own when none shows in time."""
    children = Path(f"/proc/{traced.process.pid}/task/{traced.process.pid}/children")
    for _ in range(50):
        found = children.read_text(encoding="ascii").split() if children.exists() else []
        if found:
            return int(found[0])
        time.sleep(0.1)
    return traced.process.pid


def _pct(values: Sequence[float] | np.ndarray, q: int) -> str:
    return "-" if not len(values) else f"{quantile(values, q / 100):.0f}"


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)

    def work() -> int:
        run = PipecatRun(args)
        print(run.main())
        print(f"written under {run.out}")
        return run.code

    return run_script(work)


if __name__ == "__main__":
    sys.exit(main())
