"""The report's figures as PNG bytes (matplotlib, Agg backend: no display needed).

Large runs are thinned for drawing only (CDFs to 2,000 points, run-order plots to 2,000
turns per run); every statistic is computed from all values.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from pipeline.analysis.numbers import measured
from pipeline.records.turn_row import TurnRow, column
from pipeline.report.conditions import Condition, number, title
from pipeline.report.drift import Drift
from pipeline.report.waterfall import Waterfall

COLOURS = {"A": "#1f77b4", "B": "#ff7f0e", "B'": "#2ca02c"}
OTHER_COLOURS = ("#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
KIND_COLOURS = {
    "vad": "#9e9e9e",
    "asr": "#6a3d9a",
    "llm": "#1f77b4",
    "tool": "#b15928",
    "tts": "#ff7f0e",
    "playback": "#2ca02c",
}
CDF_POINTS = 2000
ORDER_POINTS = 2000  # as the CDFs: more points than the figure (11 inches at DPI) has pixels across
DPI = 100


def colour(label: str, labels: Sequence[str]) -> str:
    if label in COLOURS:
        return COLOURS[label]
    others = [x for x in labels if x not in COLOURS]
    return OTHER_COLOURS[others.index(label) % len(OTHER_COLOURS)] if label in others else "#333333"


def png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def thin(values: np.ndarray, points: int) -> np.ndarray:
    if len(values) <= points:
        return values
    return values[np.linspace(0, len(values) - 1, points).astype(np.int64)]


def plain(text: str) -> str:
    """Data shown as itself: matplotlib reads ``$...$`` as mathematics."""
    return text.replace("$", r"\$")


def cdf_plot(conds: Sequence[Condition]) -> bytes:
    labels = [c.label for c in conds]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, metric, name in zip(axes, ("first_token_ms", "whole_turn_ms"), ("first token", "whole turn"), strict=True):
        for cond in conds:
            values = cond.values(metric)
            if len(values) == 0:
                continue
            idx = thin(np.arange(len(values)), CDF_POINTS)
            x = np.concatenate(([values[0]], values[idx]))
            y = np.concatenate(([0.0], (idx + 1) / len(values)))
            label = plain(f"{title(cond.label)} (n={len(values)})")
            ax.step(x, y, where="post", color=colour(cond.label, labels), label=label)
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("share of turns")
        ax.set_title(f"CDF of {name}, measured successful turns")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right")
        else:
            ax.text(0.5, 0.5, "no measured values", ha="center", va="center", transform=ax.transAxes)
    return png(fig)


def waterfall_plot(w: Waterfall) -> bytes:
    lanes = list(dict.fromkeys(b.lane for b in w.bars))
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(lanes) + 1.6))
    for bar in w.bars:
        y = lanes.index(bar.lane)
        ax.barh(
            y,
            max(bar.end_ms - bar.start_ms, 1.0),
            left=bar.start_ms,
            height=0.6,
            color=KIND_COLOURS.get(bar.kind, "#555555"),
            alpha=0.85,
        )
        if bar.mark_ms is not None:
            ax.plot([bar.mark_ms], [y], marker="o", color="black", markersize=4)
    ax.axvline(0, color="black", linewidth=0.8, linestyle="--")
    ax.set_yticks(range(len(lanes)), labels=[plain(lane) for lane in lanes])
    ax.invert_yaxis()
    ax.set_xlabel("ms from the end of user speech (dot: first token / first audio frame)")
    ax.set_title(plain(w.title))
    ax.grid(True, axis="x", alpha=0.3)
    return png(fig)


def order_plot(
    runs: Sequence[tuple[str, str, Sequence[TurnRow]]], labels: Sequence[str], drifts: Sequence[Drift]
) -> bytes:
    """Latency against run order, one series per run; temperature on the right axis when recorded."""
    flagged = {(d.run_id, d.metric) for d in drifts if d.flagged}
    fig, axes = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    has_temp = False
    in_order = [(run_id, label, sorted(rows, key=_start)) for run_id, label, rows in runs]
    for ax, metric, name in zip(axes, ("whole_turn_ms", "first_token_ms"), ("whole turn", "first token"), strict=True):
        temp_ax = None
        get = column(metric)
        for run_id, label, ordered in in_order:
            idx = thin(np.arange(len(ordered)), ORDER_POINTS)
            x = [int(i) for i in idx if number(get(ordered[i])) is not None and ordered[i].ok]
            y = [number(get(ordered[i])) for i in x]
            warm = [i for i in x if not measured(ordered[i])]
            tag = " (DRIFTING)" if (run_id, metric) in flagged else ""
            ax.plot(
                x,
                y,
                marker="o",
                markersize=3,
                linewidth=0.8,
                color=colour(label, labels),
                label=plain(f"{run_id} ({label}){tag}"),
            )
            if warm:
                ax.plot(
                    warm,
                    [number(get(ordered[i])) for i in warm],
                    linestyle="none",
                    marker="o",
                    markersize=7,
                    markerfacecolor="none",
                    color="black",
                )
            temps = [(int(i), t) for i in idx if (t := number(ordered[int(i)].temp_c)) is not None]
            if temps:
                has_temp = True
                temp_ax = temp_ax or ax.twinx()
                temp_ax.plot(
                    [i for i, _ in temps],
                    [t for _, t in temps],
                    color=colour(label, labels),
                    linestyle=":",
                    linewidth=1.2,
                )
                temp_ax.set_ylabel("temperature (°C, dotted)")
        ax.set_ylabel(f"{name} (ms)")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", fontsize=8)
    axes[-1].set_xlabel("turn in run order (circled: warm-up, excluded from statistics)")
    axes[0].set_title(
        "Latency against run order" + ("" if has_temp else " (no temperature sensor: temperature not recorded)")
    )
    return png(fig)


def _start(row: TurnRow) -> int:
    start = row.turn_start_ns
    return start if isinstance(start, int) else 0


def sentence_box_plot(conds: Sequence[Condition]) -> bytes:
    labels = [c.label for c in conds]
    with_values = [c for c in conds if len(c.sentence_ms)]
    fig, ax = plt.subplots(figsize=(11, 4))
    if with_values:
        parts = ax.boxplot([c.sentence_ms for c in with_values], whis=(0, 100), patch_artist=True)
        for patch, cond in zip(parts["boxes"], with_values, strict=True):
            patch.set_facecolor(colour(cond.label, labels))
            patch.set_alpha(0.6)
        ax.set_xticks(
            range(1, len(with_values) + 1),
            labels=[plain(f"{title(c.label)}\n{len(c.sentence_ms)} sentences") for c in with_values],
        )
    else:
        ax.text(0.5, 0.5, "no sentence was measured", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("per-sentence first token (ms)")
    ax.set_title("Per-sentence first-token times (box: quartiles, line: median, whiskers: min and max)")
    ax.grid(True, axis="y", alpha=0.3)
    return png(fig)
