"""``python -m pipeline.sweep FIXTURES --vary NAME=V1,V2,... --out DIR``: one variable, the rest held (M15).

Each value is a point: one replay of the same questions, rounds and base settings (``--config``)
with that one setting overridden, under its own run id ``<name>-<variable>-<value>`` and so its
own config_id, all into DIR. ``DIR/sweep.json`` records the sweep (variable, points, run ids,
config_ids, failures); ``python -m pipeline.report DIR`` reads it and names the segment that
grows with the variable. A point whose settings are refused, or whose run records no turn
(a model that cannot load), is recorded as failed and the other points still run.

Variables: devices, model (small / default / large or a model name), history_rounds,
max_tokens, threads, prompt_cache, network, condition (A / B / B'); see
``pipeline.sweep.variables``. Exit status: 0 every point ran; 1 some point failed (the others
are recorded); 2 nothing ran (bad arguments, run ids the folder already holds).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pipeline.records.bench_csv import bench_run_ids
from pipeline.settings.config import ConfigError, load_config
from pipeline.sweep.points import Point, SweepPlan, make_plan, parse_vary, slug, toml_text
from pipeline.sweep.record import FAILED, OK, PointRecord, SweepRecord, new_record, save
from pipeline.sweep.runner import RunOptions, point_plan, run_point
from pipeline.sweep.variables import VARIABLES, SweepError, warnings

ROOT = Path(__file__).resolve().parent.parent.parent


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipeline.sweep", description=__doc__.splitlines()[0])
    p.add_argument("fixtures", type=Path)
    p.add_argument(
        "--vary",
        action="append",
        default=[],
        required=True,
        metavar="NAME=V1,V2,...",
        help=f"the one variable and its values, first to last; NAME: {', '.join(VARIABLES)}",
    )
    p.add_argument("--out", type=Path, required=True, help="folder for traces/, bench.csv, sweep.json and report/")
    p.add_argument("--name", help="sweep id, the run ids' prefix (default: sweep-<time>)")
    p.add_argument("--config", type=Path, action="append", default=None, help="base settings for every point")
    p.add_argument("--rounds", type=int, default=3, help="rounds per point (the first a warm-up)")
    p.add_argument("--limit", type=int, default=6, help="first N questions per point (0 = all)")
    p.add_argument("--clock", choices=("real", "virtual"), help="passed to every point's replay")
    p.add_argument("--fast", action="store_true", help="passed to every point's replay")
    p.add_argument("--timeout", type=float, help="turn time limit (s), passed to every point's replay")
    p.add_argument("--model-cache", type=Path, help="passed to every point's replay")
    p.add_argument("--no-report", action="store_true", help="do not run the report at the end")
    args = p.parse_args(argv)
    args.config = [c.resolve() for c in (args.config or [ROOT / "configs" / "local.toml"])]
    return args


def refused_settings(point: Point, options: RunOptions, settings: Path) -> str:
    """The replay's own verdict on the point's settings, before anything runs ("" when accepted): the point's
    plan, its settings read exactly as the replay will read them."""
    try:
        point_plan(point, options, settings).config()
    except ConfigError as exc:
        return f"settings refused: {exc}"
    return ""


def held_runs(out: Path, plan: SweepPlan) -> list[str]:
    held = bench_run_ids(out / "bench.csv")
    return [p.run_id for p in plan.points if p.run_id in held or (out / "traces" / f"{p.run_id}.jsonl").is_file()]


def run_sweep(plan: SweepPlan, options: RunOptions, record: SweepRecord) -> list[PointRecord]:
    """Every point in order, the record saved after each; returns the points' records."""
    folder = options.out / "sweep" / plan.sweep_id
    folder.mkdir(parents=True, exist_ok=True)
    save(options.out, record)
    for i, point in enumerate(plan.points):
        settings = folder / f"{slug(point.value)}.toml"
        settings.write_text(toml_text(point.overrides), encoding="utf-8")
        log = folder / f"{point.run_id}.log"
        label = f"point {i + 1}/{len(plan.points)} {plan.variable.name}={point.value} ({point.run_id})"
        print(f"{label} ...", file=sys.stderr, flush=True)
        refused = refused_settings(point, options, settings)
        if refused:
            done = PointRecord(point.value, point.run_id, point.overrides, status=FAILED, error=refused)
        else:
            done = run_point(point, options, settings, log)
            done.log = str(log.relative_to(options.out))
        record.points[i] = done
        save(options.out, record)
        said = f"config {done.config_id}, {done.turns} turn(s), {done.seconds} s" if done.status == OK else done.error
        print(f"{label}: {done.status}: {said}", file=sys.stderr, flush=True)
    record.finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    save(options.out, record)
    return record.points


def shared_config_ids(points: Sequence[PointRecord]) -> list[str]:
    """Points that ran under one config_id: the variable changed nothing config_id hashes."""
    by_id: dict[str, list[str]] = {}
    for p in points:
        if p.config_id:
            by_id.setdefault(p.config_id, []).append(p.value)
    return [f"{', '.join(values)} share config_id {cid}" for cid, values in by_id.items() if len(values) > 1]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sweep_id = args.name or time.strftime("sweep-%Y%m%d-%H%M%S")
    try:
        variable, values = parse_vary(args.vary)
        base = load_config(args.config)
        plan = make_plan(sweep_id, variable, values, base)
    except (SweepError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    held = held_runs(out, plan)
    if held:
        print(f"error: {out} already holds run(s) {', '.join(held)}: give the sweep a fresh --name", file=sys.stderr)
        return 2
    for warning in warnings(variable, base):
        print(f"warning: {warning}", file=sys.stderr)
    model_cache = args.model_cache.resolve() if args.model_cache else None
    fixtures, configs = args.fixtures.resolve(), tuple(args.config)
    options = RunOptions(
        ROOT, fixtures, configs, out, args.rounds, args.limit, args.clock, args.fast, args.timeout, model_cache
    )
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    record = new_record(plan, options.fixtures, list(options.configs), args.rounds, args.limit, started)
    points = run_sweep(plan, options, record)
    for shared in shared_config_ids(points):
        print(f"warning: {shared}: the points are not distinct configurations (M11)", file=sys.stderr)
    print(f"sweep {sweep_id}: {variable.name} = {', '.join(values)}; record: {out / 'sweep.json'}")
    for p in points:
        print(f"  {p.value}: {p.status} {p.run_id} " + (f"config {p.config_id}" if p.status == OK else p.error))
    if not args.no_report:
        # exit 3 (comparison refused) is expected: the points differ in one setting within one condition
        subprocess.run([sys.executable, "-m", "pipeline.report", str(out), "--out", str(out / "report")], cwd=ROOT)
    return 0 if all(p.status == OK for p in points) else 1


if __name__ == "__main__":
    raise SystemExit(main())
