"""Benchmark of end-of-turn detection: the frontier (users cut off against silence) of every detector, tuned on
one half of the paused questions and reported on the other.

    python scripts/bench_turns.py [--detectors frontier] [--clock real|virtual] [--config FILE ...]
        [--devices N] [--limit N] [--out DIR]

The questions (``audio_fixtures/paused/``: each question twice, with its pauses and without) are split in two
halves by question, a question's two takes always in the same half: odd question numbers tune, even ones are
held out. Each half is one ``pipeline.sweep`` over ``endpoint`` (the same base settings, rounds and clock for
every detector), read back from its traces as the report reads them (``pipeline.report.cutoffs``).

Each half's sweep writes its report (``runs/report/``), whose section "What the silence costs" draws the frontier
(``plots/endpoint-frontier.png``). Printed, per half: each setting's cut-off rate with its 95 % Wilson interval,
the silence from the true end of speech (median, P90), the end-point delay (median), the CPU per decision of the
detector, and whether it is on the frontier. Then the goal: a lab setting that cuts off no more users than the
real server's shipped setting (``silero:xiaozhi-server``: the server's own rule and its shipped 200 ms) and keeps
them waiting less. It is chosen on the tuning half (of those that cut off no more, the one with the least median
silence) and judged on the held-out half; where none qualifies, the table says why. The script exits 0 either way:
it measures.

``--devices N`` asks the same with N devices at once on the one pipeline (``[fleet] devices``, staggered 500 ms
apart, each with its own session and question order): every device's detector runs on the same CPU as the
others' and as the rest of the pipeline, so a detector's inference cost shows in the silence and the
cut-offs (the frontier at one device against the frontier at a server's knee). The devices share one process,
the sessions ``pipeline.serve`` runs, without the wire. ``--limit N`` asks the first N questions of each half.

``--clock virtual`` runs the same detectors on the same audio in simulated time: the decisions (in audio time)
are the same, the silences leave out what the detectors cost, which the CPU column still shows; ``real`` (the
default) runs the questions at real-time pace, the detectors' cost inside the silence. Run it alone
(``flock -x /tmp/lab-bench.lock``): another process on the machine slows a model's decisions.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

from pipeline.analysis.numbers import quantile
from pipeline.interop.capacity_mode import fixtures_without
from pipeline.report.cutoffs import EndSetting, end_settings, on_frontier
from pipeline.report.load import load_paths
from pipeline.settings.fixtures import load_questions
from pipeline.sweep.points import slug

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "audio_fixtures" / "paused"
SIMULATOR = ROOT / "configs" / "simulator.toml"
SHIPPED = "silero:xiaozhi-server"  # the real server's shipped rule and wait, as the lab's Silero profile runs it


def question_number(question_id: str) -> int:
    """``zh07_paused`` -> 7: a question's two takes share it."""
    digits = "".join(ch for ch in question_id.split("_", 1)[0] if ch.isdigit())
    return int(digits) if digits else 0


def write_half(fixtures: Path, target: Path, keep_odd: bool) -> list[str]:
    """A fixtures folder of the questions of one half (their audio linked, their manifest and truth lines);
    returns their ids."""
    ids = [q.id for q in load_questions(fixtures).questions]
    other = [i for i in ids if question_number(i) % 2 != int(keep_odd)]
    fixtures_without(fixtures, ",".join(other), target)
    return [i for i in ids if i not in other]


def sweep(half: Path, out: Path, name: str, args: argparse.Namespace) -> float:
    """One ``pipeline.sweep`` over the detectors on one half; returns its wall time (s)."""
    configs = [c for path in args.config for c in ("--config", str(path))]
    command = [sys.executable, "-m", "pipeline.sweep", str(half), "--vary", f"endpoint={args.detectors}"]
    command += [*configs, "--rounds", str(args.rounds), "--limit", str(args.limit), "--clock", args.clock]
    command += ["--out", str(out), "--name", name]  # its report draws the frontier (section 1d's figure)
    started = time.perf_counter()
    with (out.parent / "sweep.log").open("w", encoding="utf-8") as log:
        subprocess.run(command, check=True, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    return time.perf_counter() - started


def fleet_config(out: Path, devices: int) -> Path:
    """The settings that put ``devices`` devices on the pipeline at once, staggered so they do not all pause
    together (a fleet's devices start when their users do)."""
    path = out / "fleet.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[fleet]\ndevices = {devices}\narrival = "staggered"\ngap_ms = 500\n', encoding="utf-8")
    return path


def value_of(setting: EndSetting) -> str:
    """The sweep value a setting was run as, made safe for a run id (its run id's tail), to match the halves."""
    run_id = str(setting.rows[0].run_id)
    return run_id.split("-endpoint-", 1)[1] if "-endpoint-" in run_id else setting.label


def cpu_per_decision(setting: EndSetting) -> str:
    """The detector's CPU per decision over the setting's turns (its thread's CPU clock), or why there is none."""
    spent = [r.vad_decision_cpu_ms for r in setting.rows if r.vad_decision_cpu_ms is not None]
    decisions = sum(r.vad_decisions or 0 for r in setting.rows if r.vad_decision_cpu_ms is not None)
    return f"{sum(spent) / decisions:.2f}" if decisions else "not metered"


def table(settings: Sequence[EndSetting]) -> list[str]:
    frontier = on_frontier(settings)
    head = f"{'setting':<44} {'n':>3} {'cut off [95%]':>22} {'silence med':>11} {'P90':>7} {'delay med':>9}"
    lines = [head + f" {'CPU/decision ms':>15}  frontier"]
    for s, front in zip(settings, frontier, strict=True):
        cut = f"{100 * s.cut.share:.1f}% [{100 * s.cut.low:.1f}-{100 * s.cut.high:.1f}]"
        silence = f"{s.silence:.0f}" if s.silence is not None else "-"
        p90 = f"{quantile(s.true_end, 0.9):.0f}" if len(s.true_end) else "-"
        delay = f"{quantile(s.delay, 0.5):.0f}" if len(s.delay) else "-"
        lines.append(
            f"{s.label[:44]:<44} {len(s.rows):>3} {cut:>22} {silence:>11} {p90:>7} {delay:>9} "
            f"{cpu_per_decision(s):>15}  {'yes' if front else 'no'}"
        )
    return lines


def qualifies(candidate: EndSetting, shipped: EndSetting) -> bool:
    """Cuts off no more users than the shipped setting and keeps them waiting less (median from the true end)."""
    mine, theirs = candidate.silence, shipped.silence
    return candidate.cut.share <= shipped.cut.share and mine is not None and theirs is not None and mine < theirs


def verdict(tune: dict[str, EndSetting], held: dict[str, EndSetting]) -> list[str]:
    """The goal, chosen on the tuning half and judged on the held-out one."""
    shipped = slug(SHIPPED)  # as the sweep names its point
    if shipped not in tune or shipped not in held:
        return [f"no goal: {SHIPPED} was not among the detectors measured"]
    ref = tune[shipped]
    chosen = sorted((s for v, s in tune.items() if v != shipped and qualifies(s, ref)), key=lambda s: s.silence or 0.0)
    if not chosen:
        why = [f"  {v}: cut off {100 * s.cut.share:.1f}%, silence {s.silence}" for v, s in tune.items() if v != shipped]
        return [f"no lab setting cut off no more than {SHIPPED} ({100 * ref.cut.share:.1f}%) and waited less:", *why]
    pick = value_of(chosen[0])
    out, ref_out = held.get(pick), held[shipped]
    if out is None:
        return [f"chosen on the tuning half: {pick}; it has no held-out turns"]
    met = qualifies(out, ref_out)
    tuned = f"cut off {100 * chosen[0].cut.share:.1f}% against {100 * ref.cut.share:.1f}%"
    return [
        f"chosen on the tuning half: {pick} ({tuned})",
        f"held out: {pick} cuts off {100 * out.cut.share:.1f}% [{100 * out.cut.low:.1f}-{100 * out.cut.high:.1f}],"
        f" silence median {out.silence:.0f} ms; {SHIPPED} {100 * ref_out.cut.share:.1f}%"
        f" [{100 * ref_out.cut.low:.1f}-{100 * ref_out.cut.high:.1f}], {ref_out.silence:.0f} ms",
        f"goal {'met' if met else 'not met'} on the held-out half",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fixtures", type=Path, default=FIXTURES, help="questions with a truth.csv (paused and plain)")
    p.add_argument("--detectors", default="frontier", help="the endpoint values, comma-separated, or 'frontier'")
    p.add_argument("--config", type=Path, action="append", help="base settings (default: configs/simulator.toml)")
    p.add_argument("--clock", choices=("real", "virtual"), default="real")
    p.add_argument("--rounds", type=int, default=2, help="rounds per point, the first a warm-up (M6)")
    p.add_argument("--devices", type=int, default=1, help="devices asking at once on the one pipeline")
    p.add_argument("--limit", type=int, default=0, help="the first N questions of each half (0: all)")
    p.add_argument("--out", type=Path, default=Path("/tmp/bench-turns"), help="emptied first")
    args = p.parse_args(argv)
    args.config = [c.resolve() for c in (args.config or [SIMULATOR])]
    shutil.rmtree(args.out, ignore_errors=True)
    if args.devices > 1:
        args.config.append(fleet_config(args.out, args.devices))
    found: dict[str, dict[str, EndSetting]] = {}
    for half, odd in (("tune", True), ("held-out", False)):
        ids = write_half(args.fixtures.resolve(), args.out / half / "fixtures", odd)
        seconds = sweep(args.out / half / "fixtures", args.out / half / "runs", half, args)
        settings = end_settings(load_paths([args.out / half / "runs"]))
        found[half] = {value_of(s): s for s in settings}
        asked = f"{len(ids)} questions" + (f" (the first {args.limit} asked)" if args.limit else "")
        fleet = f", {args.devices} devices at once" if args.devices > 1 else ""
        print(f"\n{half}: {asked}, {args.rounds} rounds ({args.clock} clock){fleet}, {seconds:.0f} s")
        print("\n".join(table(settings)))
        print(f"frontier drawn: {args.out / half / 'runs' / 'report' / 'plots' / 'endpoint-frontier.png'}")
    print()
    print("\n".join(verdict(found["tune"], found["held-out"])))
    print(f"\nload while measuring: {os.getloadavg()[0]:.2f} (1 min average, {os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
