"""A soak's part of the capacity section: its drift verdict, its windows and its drift checks, read from the
soak.json that ``pipeline.capacity --soak`` wrote beside capacity.json (``records.soak_result``).

Every figure is the soak's own, as it wrote them window by window; a window's server figures are empty when
the soak had no ``--server-pid``, its machine timings when it was run with ``--no-machine-speed``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from pipeline.records.ramp_result import FAILURE_KINDS, MachineSpeed
from pipeline.records.soak_result import DriftCheck, Soak, SoakFileError, SoakWindow, read
from pipeline.report import plots
from pipeline.report.cells import NOT_MEASURED
from pipeline.report.document import NOTE, WARNING, Block, Figure, Paragraph, Table

FILE = "soak.json"

HEADERS = (
    "window",
    "s",
    "turns",
    "silence P50 ms [95 % CI]",
    "silence P90 ms [95 % CI]",
    "failed",
    "server CPU",
    "RSS min-max MiB",
    "fds, threads",
    "traces MiB (devices, server)",
    "machine JSON / socket / Opus / ONNX ms",
)
DRIFT_HEADERS = ("figure", "first", "last", "rho", "per hour", "drifted", "why")


def _q(value: float | None, ci: tuple[float, float] | None) -> str:
    if value is None:
        return NOT_MEASURED
    return f"{value:.0f} [{ci[0]:.0f}, {ci[1]:.0f}]" if ci else f"{value:.0f}"


def _number(value: float | None, digits: int = 0) -> str:
    return NOT_MEASURED if value is None else f"{value:.{digits}f}"


def machine_cells(m: MachineSpeed | None) -> str:
    """The machine's four timings in one cell (the steps' table shows them too)."""
    if m is None:
        return NOT_MEASURED
    return " / ".join(_number(v, 1) for v in (m.json_ms, m.socket_ms, m.opus_ms, m.onnx_ms))


def window_row(w: SoakWindow) -> tuple[str, ...]:
    failed = sum(w.failures.get(k, 0) for k in FAILURE_KINDS)
    rss = NOT_MEASURED if w.rss_max_mb is None else f"{_number(w.rss_min_mb)}-{_number(w.rss_max_mb)}"
    return (
        str(w.index),
        f"{w.start_s:.0f}-{w.end_s:.0f}",
        str(w.turns),
        _q(w.silence_ms.p50, w.silence_ms.p50_ci),
        _q(w.silence_ms.p90, w.silence_ms.p90_ci),
        str(failed),
        NOT_MEASURED if w.server_cpu_pct is None else f"{w.server_cpu_pct:.0f} %",
        rss,
        f"{_number(w.fds_max)}, {_number(w.threads_max)}",
        f"{w.device_traces_mb:.1f}, {_number(w.server_traces_mb, 1)}",
        machine_cells(w.machine),
    )


def drift_row(c: DriftCheck) -> tuple[str, ...]:
    rho = "-" if c.rho is None else f"{c.rho:.2f}"  # None: the windows' values did not vary (or too few)
    return (
        c.figure,
        _number(c.first, 1),
        _number(c.last, 1),
        rho,
        _number(c.per_hour, 1),
        "yes" if c.flagged else "no",
        c.reason,
    )


def _duration(seconds: float) -> str:
    return f"{seconds:g} s" if seconds < 120 else f"{seconds / 60:g} min"


def words(s: Soak) -> str:
    drifted = [c.figure for c in s.drift if c.flagged]
    verdict = f"drifted ({', '.join(drifted)})" if drifted else "no figure drifted"
    return (
        f"Soak: {s.devices} device(s) held {_duration(s.duration_s)} in windows of {_duration(s.window_s)} "
        f"({len(s.windows)} written): {verdict}. A figure drifts when its last window lies above the first "
        "window's interval and the windows rise in order (Spearman's rho >= 0.5, M20); the server's RSS, "
        "descriptors and threads are judged from the second window, the first being its warm-up."
    )


def plot(s: Soak) -> bytes:
    """The silence P50 and P90 per window with their intervals, and the server's RSS on a second axis."""
    fig, ax = plt.subplots(figsize=(9, 4.5))
    mid = [(w.start_s + w.end_s) / 120 for w in s.windows]
    for key, style in (("p50", "o-"), ("p90", "s-")):
        shown = [(x, w) for x, w in zip(mid, s.windows, strict=True) if getattr(w.silence_ms, key) is not None]
        values = [getattr(w.silence_ms, key) for _x, w in shown]
        cis = [getattr(w.silence_ms, f"{key}_ci") or (v, v) for (_x, w), v in zip(shown, values, strict=True)]
        low = [v - ci[0] for v, ci in zip(values, cis, strict=True)]
        high = [ci[1] - v for v, ci in zip(values, cis, strict=True)]
        ax.errorbar([x for x, _w in shown], values, yerr=[low, high], fmt=style, capsize=3, label=f"silence {key}")
    ax.set_xlabel("minutes since the last device arrived")
    ax.set_ylabel("silence ms (end of speech -> first audible)")
    ax.grid(True, alpha=0.3)
    rss = [(x, w.rss_max_mb) for x, w in zip(mid, s.windows, strict=True) if w.rss_max_mb is not None]
    if rss:
        other = ax.twinx()
        other.plot([x for x, _r in rss], [r for _x, r in rss], "--", color=plots.OTHER_COLOURS[1], label="RSS max")
        other.set_ylabel("server RSS MiB (the most sampled)")
        other.legend(loc="upper right", fontsize=8)
    ax.legend(loc="upper left", fontsize=8)
    return plots.png(fig)


def blocks(capacity_json: Path, key: str, draw: bool) -> list[Block]:
    """The soak beside ``capacity_json``, when there is one: its verdict, windows, checks and plot."""
    path = capacity_json.parent / FILE
    if not path.is_file():
        return []
    try:
        s = read(path)
    except SoakFileError as exc:
        return [Paragraph(f"Unreadable soak result: {exc}", WARNING)]
    out: list[Block] = [Paragraph(words(s), WARNING if any(c.flagged for c in s.drift) else NOTE)]
    rows = tuple(window_row(w) for w in s.windows)
    out.append(Table(f"{key}-soak", HEADERS, rows, caption=f"The soak, window by window ({path})"))
    out.append(Table(f"{key}-drift", DRIFT_HEADERS, tuple(drift_row(c) for c in s.drift), caption="Drift checks"))
    if draw and any(w.silence_ms.p50 is not None for w in s.windows):
        out.append(
            Figure(
                f"{key}-soak",
                plot(s),
                "Silence P50 and P90 per soak window with their 95 % intervals; the server's RSS (most sampled).",
                "Silence and server memory across the soak's windows",
            )
        )
    return out
