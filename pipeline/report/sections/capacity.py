"""The capacity section: "How many devices this server holds", from the ramps recorded beside the traces.

Shown only when a trace file sits in a capacity folder (``python -m pipeline.capacity ... --out DIR``: DIR
holds capacity.json and each step's run under steps/<N>/). For each ramp: what it held and why it stopped,
the table of its steps (silence P50/P90/P99 with the P90's interval, whole turn, failures by kind, the
server's CPU and RSS, the generator's own lateness, the machine's speed before the step, the verdict and its
reason), a soak's windows and drift checks where the ramp was a soak (``soak_windows``); then, for all of them,
the devices each held per core its own process kept busy there, and one figure: silence percentiles against
devices, and devices per busy core, one colour per server, each knee marked.

Every figure is the ramp's own (capacity.json, computed from each step's traces by the ramp); a step whose
run is not among the traces read is said, never filled in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from pipeline.records.ramp_result import FAILURE_KINDS, Capacity, CapacityFileError, Step, read
from pipeline.report import plots
from pipeline.report.cells import NOT_MEASURED
from pipeline.report.document import NOTE, WARNING, Block, Figure, Heading, Paragraph, Table
from pipeline.report.sections import soak_windows
from pipeline.report.sections.base import Context

FILE = "capacity.json"
TITLE = "How many devices this server holds"
LEVELS_UP = 4  # a step's trace file: DIR/steps/<N>/traces/<run>.jsonl


@dataclass(frozen=True, slots=True)
class RampFolder:
    """One capacity folder's result, and where it was read."""

    found: Capacity
    path: str

    @property
    def name(self) -> str:
        return self.found.label or self.found.server


def capacity_folders(files: Sequence[str]) -> list[Path]:
    """Capacity folders above these trace files, each once, in the order first met."""
    found: dict[Path, None] = {}
    for name in files:
        for folder in list(Path(name).parents)[:LEVELS_UP]:
            if (folder / FILE).is_file():
                found[folder] = None
                break
    return list(found)


def read_ramps(files: Sequence[str]) -> tuple[list[RampFolder], list[str]]:
    ramps, problems = [], []
    for folder in capacity_folders(files):
        try:
            ramps.append(RampFolder(read(folder / FILE), str(folder / FILE)))
        except CapacityFileError as exc:
            problems.append(str(exc))
    return ramps, problems


def covering(ctx: Context) -> bool:
    """Whether every run in view is a step of a ramp: then the ramps are the reading (the condition sections
    would pool steps of different device counts, which differ by design)."""
    ramps, _ = read_ramps(ctx.data.files)
    steps = {s.run_id for r in ramps for s in r.found.steps}
    return bool(ramps) and set(ctx.data.runs) <= steps


def _ms(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:.0f}"


def _p90(s: Step) -> str:
    q = s.silence_ms
    if q.p90 is None:
        return NOT_MEASURED
    return f"{q.p90:.0f} [{q.p90_ci[0]:.0f}, {q.p90_ci[1]:.0f}]" if q.p90_ci else f"{q.p90:.0f}"


def _failed(s: Step) -> str:
    kinds = [f"{s.failures.get(k, 0)} {k.replace('_', ' ')}" for k in FAILURE_KINDS if s.failures.get(k, 0)]
    return ", ".join(kinds) if kinds else "0"


def _late(s: Step) -> str:
    if s.lateness_p99_ms is None:
        return f"{NOT_MEASURED} (nothing recorded)"
    return f"{s.lateness_p50_ms:.2f} / {s.lateness_p99_ms:.2f}"


def _server(s: Step) -> str:
    if s.server_cpu_pct is None and s.server_rss_mb is None:
        return f"{NOT_MEASURED} (no --server-pid)"
    cpu = NOT_MEASURED if s.server_cpu_pct is None else f"{s.server_cpu_pct:.0f} %"
    rss = NOT_MEASURED if s.server_rss_mb is None else f"{s.server_rss_mb:.0f} MiB"
    return f"{cpu}, {rss}"


HEADERS = (
    "devices",
    "verdict",
    "turns",
    "silence P50 ms",
    "silence P90 ms [95 % CI]",
    "silence P99 ms",
    "whole turn P50 / P90 ms",
    "failed",
    "server CPU, RSS (max)",
    "generator lateness P50 / P99 ms",
    "machine JSON / socket / Opus / ONNX ms",
    "why",
)


def step_row(s: Step, shown: bool) -> tuple[str, ...]:
    verdict = s.verdict if shown else f"{s.verdict} (run not in these traces)"
    return (
        str(s.devices),
        verdict,
        str(s.turns),
        _ms(s.silence_ms.p50),
        _p90(s),
        _ms(s.silence_ms.p99),
        f"{_ms(s.whole_turn_p50_ms)} / {_ms(s.whole_turn_p90_ms)}",
        _failed(s),
        _server(s),
        _late(s),
        soak_windows.machine_cells(s.machine),
        s.reason,
    )


def held_words(r: RampFolder) -> str:
    c = r.found
    margin = f"+{c.margin_pct:g} % or +{c.margin_floor_ms:g} ms, whichever is more"
    if c.devices_held is None:
        held = "held no step"
    elif c.none_failed:
        held = f"held {c.devices_held} device(s) or more (no step failed; the ramp ended first)"
    else:
        held = f"holds {c.devices_held} device(s)"
    mode = c.profile.get("listen_mode", "?")
    return (
        f"{r.name} ({c.transport}, {mode} listening): {held} with the P90 silence within {margin} of the first "
        f"step's and no failed turn; at least {c.min_turns} measured turns per step, each held {c.hold_s:g} s "
        f"(up to {c.max_hold_s:g} s). Stopped: {c.stopped or 'not recorded'}."
        + (f" Grew first: {c.grew_first}." if c.grew_first else "")
    )


def per_core(s: Step) -> float | None:
    """The step's devices per core its server was busy (None without the server's CPU, or with none used)."""
    if s.server_cpu_pct is None or s.server_cpu_pct <= 0:
        return None
    return s.devices / (s.server_cpu_pct / 100)


def held_step(c: Capacity) -> Step | None:
    return next((s for s in c.steps if s.devices == c.devices_held), None)


def per_core_table(ramps: Sequence[RampFolder]) -> Table:
    """Each server's devices held at the silence SLO (the ramp's verdict) per core of its own CPU at that step."""
    rows = []
    for r in ramps:
        held = held_step(r.found)
        ratio = None if held is None else per_core(held)
        cpu = NOT_MEASURED if held is None or held.server_cpu_pct is None else f"{held.server_cpu_pct:.0f} %"
        shown = str(r.found.devices_held) + ("+" if r.found.none_failed else "") if held is not None else "none"
        rows.append((r.name, r.found.transport, shown, cpu, NOT_MEASURED if ratio is None else f"{ratio:.1f}"))
    return Table(
        "capacity-per-core",
        ("server", "transport", "devices held", "server CPU there (% of a core)", "devices per busy core"),
        tuple(rows),
        caption="Devices held at the silence SLO (P90 within the margin of the first step's, no failed turn) per "
        "core the server itself kept busy at that step (its process's CPU by its PID; the services, the LLM and "
        "the callers are not in it). A `+`: no step failed, so the server may hold more.",
    )


def curve(ramps: Sequence[RampFolder]) -> bytes:
    """Silence P50/P90/P99 against devices (left) and devices per busy core of the server (right), one colour per
    server, the knee ringed."""
    fig, (ax, right) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": (3, 2)})
    names = [r.name for r in ramps]
    for r in ramps:
        colour = plots.colour(r.name, names) if len(ramps) > 1 else plots.OTHER_COLOURS[0]
        steps = [s for s in r.found.steps if s.silence_ms.p90 is not None]
        x = [s.devices for s in steps]
        for key, style in (("p50", ":"), ("p90", "-"), ("p99", "--")):
            y = [getattr(s.silence_ms, key) for s in steps]
            ax.plot(x, y, style, marker="o", color=colour, label=plots.plain(f"{r.name} {key.upper()}"))
        knee = next((s for s in steps if s.devices == r.found.knee), None)
        if knee is not None and knee.silence_ms.p90 is not None:
            ax.plot([knee.devices], [knee.silence_ms.p90], "o", ms=16, mfc="none", mec=colour, mew=2)
            ax.annotate(
                f"held {knee.devices}+" if r.found.none_failed else f"knee: {knee.devices}",
                (knee.devices, knee.silence_ms.p90),
                xytext=(8, 8),
                textcoords="offset points",
                color=colour,
            )
        _per_core_curve(right, r, colour)
    ticks = sorted({s.devices for r in ramps for s in r.found.steps})
    for axis in (ax, right):
        axis.set_xscale("log")
        axis.set_xticks(ticks, [str(t) for t in ticks])
        axis.minorticks_off()
        axis.set_xlabel("devices")
        axis.grid(True, alpha=0.3)
    ax.set_ylabel("silence ms (end of speech -> first audible)")
    right.set_ylabel("devices per core the server kept busy")
    ax.legend(fontsize=8)
    return plots.png(fig)


def _per_core_curve(ax: Axes, r: RampFolder, colour: str) -> None:
    """One server's devices per busy core at each step, the step it held ringed."""
    steps = [(s.devices, v) for s in r.found.steps if (v := per_core(s)) is not None]
    if not steps:
        return
    ax.plot(*zip(*steps, strict=True), "-", marker="o", color=colour, label=plots.plain(r.name))
    held = held_step(r.found)
    if held is not None and (v := per_core(held)) is not None:
        ax.plot([held.devices], [v], "o", ms=16, mfc="none", mec=colour, mew=2)


def section(ctx: Context) -> list[Block]:
    ramps, problems = read_ramps(ctx.data.files)
    if not ramps and not problems:
        return []
    out: list[Block] = [Heading(2, TITLE)]
    out += [Paragraph(f"Unreadable capacity result: {p}", WARNING) for p in problems]
    runs = set(ctx.data.runs)
    for i, r in enumerate(ramps):
        out.append(Paragraph(held_words(r)))
        rows = tuple(step_row(s, s.run_id in runs) for s in r.found.steps)
        key = "capacity" if i == 0 else f"capacity-{i + 1}"
        out.append(Table(key, HEADERS, rows, caption=f"{r.name}: each step of the ramp ({r.path})"))
        out += soak_windows.blocks(Path(r.path), key, ctx.draw)
        if any(s.lateness_p99_ms is None for s in r.found.steps):
            out.append(Paragraph("The generator's send lateness was not recorded: no step could be voided.", NOTE))
    if any(r.found.devices_held is not None for r in ramps):
        out.append(per_core_table(ramps))
    if ctx.draw and any(s.silence_ms.p90 is not None for r in ramps for s in r.found.steps):
        out.append(
            Figure(
                "capacity",
                curve(ramps),
                "Left: silence (end of speech -> first audible) P50 (dotted), P90 (solid), P99 (dashed) against "
                "devices; the knee (the last step that held before the first that failed) ringed. Right: devices "
                "per core the server kept busy (its own CPU), the step it held ringed.",
                "Silence percentiles against the number of devices, one colour per server",
            )
        )
    return out
