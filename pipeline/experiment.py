"""``python -m pipeline.experiment DIR --out FOLDER``: conditions A, B and B' run the same way, then the report.

Every condition replays the same questions in the same order, with the same rounds,
warm-up, max_tokens and every other setting; only what defines the condition differs:
A sends the LLM to an OpenAI-compatible endpoint (by default the emulated cloud behind
the ``internet`` network profile; ``--cloud FILE`` names a real one), B runs it on the
device, B' runs B inside a network namespace with only loopback and a verdict on
whether anything tried to leave (``python -m pipeline.offline``). Each condition is a run
with its own run_id; everything lands in FOLDER, which ``python -m pipeline.report``
reads (and which this command reports on at the end).

By default the conditions are interleaved turn by turn (``--order interleaved``): every condition's
process starts at once and keeps its models loaded, and they take each turn in the order A B B',
B' B A, A B B' ... (``pipeline.run.interleave``), so a machine that slows over the hour slows every
condition alike (METHOD M15). ``--order sequential`` runs them one after another, as before.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from pipeline.plan.command_line import replay_argv
from pipeline.plan.run_plan import RunPlan
from pipeline.records.bench_csv import bench_run_ids
from pipeline.run.interleave import conduct, described

ROOT = Path(__file__).resolve().parent.parent
CONDITIONS = ("A", "B", "B'")
ORDERS = ("interleaved", "sequential")


def emulated_cloud(folder: Path, network: str, profile: str) -> Path:
    """A [llm]/[cloud]/[network] override for condition A against the emulated cloud."""
    path = folder / "condition-a.toml"
    path.write_text(
        f'[llm]\nimpl = "openai"\nmodel = "emulated-cloud"\n'
        f'[cloud]\nemulator = "{profile}"\n[network]\nprofile = "{network}"\n',
        encoding="utf-8",
    )
    return path


def run_ids(args: argparse.Namespace) -> dict[str, str]:
    return {"A": f"{args.name}-A", "B": f"{args.name}-B", "B'": f"{args.name}-Bp"}


def existing_runs(args: argparse.Namespace, wanted: Sequence[str]) -> list[str]:
    """This experiment's run ids that the folder already holds (a trace file or bench.csv rows)."""
    held = bench_run_ids(args.out / "bench.csv")
    ids = [run_ids(args)[c] for c in wanted]
    return [i for i in ids if i in held or (args.out / "traces" / f"{i}.jsonl").is_file()]


def commands(args: argparse.Namespace, gated: bool = False) -> dict[str, list[str]]:
    """Each condition's command: its run's plan written as the replay's command line (B': the offline run's,
    which passes it on to the replay it runs offline, with condition B'); ``gated``: each run takes its turns
    when told (interleaved conditions)."""
    cloud = args.cloud or emulated_cloud(args.out, args.network, args.emulator)
    ids = run_ids(args)

    def argv(condition: str, configs: Sequence[Path], named: bool = True) -> list[str]:
        run = {"rounds": args.rounds, "limit": args.limit, **({"condition": condition} if named else {})}
        plan = RunPlan(
            args.fixtures,
            ids[condition],
            tuple(configs),
            {"run": run},
            out=args.out,
            append=args.append,
            model_cache=args.model_cache,
            quiet=True,
            turn_gate=gated,
        )
        return replay_argv(plan)

    replay = [sys.executable, "-m", "pipeline.replay"]
    offline = [sys.executable, "-m", "pipeline.offline"]
    return {
        "A": [*replay, *argv("A", [*args.config, cloud])],
        "B": [*replay, *argv("B", args.config)],
        "B'": [*offline, *argv("B'", args.config, named=False)],
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipeline.experiment", description=__doc__.splitlines()[0])
    p.add_argument("fixtures", type=Path)
    p.add_argument("--out", type=Path, required=True, help="experiment folder")
    p.add_argument("--name", default="exp", help="run ids are NAME-A, NAME-B, NAME-Bp")
    p.add_argument("--config", type=Path, action="append", default=None, help="base settings for every condition")
    p.add_argument("--cloud", type=Path, help="condition A's [llm]/[cloud]/[network] settings (a real endpoint)")
    p.add_argument("--emulator", default="fast-70b-api", help="emulated cloud compute profile (without --cloud)")
    p.add_argument("--network", default="internet", help="network profile for the emulated cloud")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--limit", type=int, default=6)
    p.add_argument("--conditions", default=",".join(CONDITIONS))
    p.add_argument("--model-cache", type=Path)
    p.add_argument("--append", action="store_true", help="add turns to runs of the same --name already in --out")
    p.add_argument(
        "--order",
        choices=ORDERS,
        default="interleaved",
        help="interleaved (default): the conditions take turns, each process kept warm; sequential: one after another",
    )
    args = p.parse_args(argv)
    args.config = args.config or [ROOT / "configs" / "local.toml"]
    return args


def run_conditions(args: argparse.Namespace, wanted: Sequence[str]) -> dict[str, int]:
    """Each wanted condition's exit status, run in ``args.order``."""
    interleaving = args.order == "interleaved" and len(wanted) > 1
    every = commands(args, gated=interleaving)
    if interleaving:
        print(f"conditions interleaved turn by turn: {described(wanted)}", file=sys.stderr, flush=True)
        return conduct({c: every[c] for c in wanted}, ROOT, lambda m: print(m, file=sys.stderr, flush=True))
    codes = {}
    for condition in wanted:
        print(f"condition {condition} ...", file=sys.stderr, flush=True)
        codes[condition] = subprocess.run(every[condition], cwd=ROOT).returncode
    return codes


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    wanted = [c.strip() for c in args.conditions.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in CONDITIONS]
    if unknown:
        print(f"error: unknown condition(s) {', '.join(unknown)}; choose from {', '.join(CONDITIONS)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    found = existing_runs(args, wanted)
    if found and not args.append:
        print(
            f"error: {args.out} already holds run(s) {', '.join(found)}: a second experiment would merge into them. "
            "Give a fresh --name (new run ids in the same folder), another --out, or --append.",
            file=sys.stderr,
        )
        return 2
    codes = run_conditions(args, wanted)
    report = subprocess.run([sys.executable, "-m", "pipeline.report", str(args.out), "--out", str(args.out / "report")])
    for condition, code in codes.items():
        said = {3: "  (3 = something reached out)", 4: "  (4 = the offline check could not be completed)"}
        print(f"condition {condition}: exit code {code}" + said.get(code, ""))
    return 0 if all(c in (0, 3, 4) for c in codes.values()) and report.returncode in (0, 3) else 1


if __name__ == "__main__":
    raise SystemExit(main())
