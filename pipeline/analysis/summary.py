"""The end-of-run summary table: median, P90, min, max and success rate per run (M6-M8)."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.analysis.numbers import measured
from pipeline.analysis.stats import HEADLINE_METRICS, group_rows, success_rate, summaries, summarize
from pipeline.records.turn_row import TurnRow


def _fmt(value: float | None, metric: str) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if metric.endswith("_ms") or metric in ("llm_calls", "sentences") else f"{value:.2f}"


def summary_table(rows: Sequence[TurnRow]) -> str:
    lines = []
    for (run_id, condition, config_id), group in group_rows(rows).items():
        ok, turns = success_rate(group)
        warmups = sum(1 for r in group if not measured(r))
        rate = f"{100 * ok / turns:.0f}%" if turns else "-"
        if not turns:
            lines.append(
                f"run {run_id}  condition {condition}  config {config_id}: "
                f"no measured turns: all {warmups} were warm-up (use --rounds 2 or more)"
            )
            continue
        lines.append(
            f"run {run_id}  condition {condition}  config {config_id}: "
            f"success {ok}/{turns} ({rate}); {warmups} warm-up turn(s) excluded from the statistics"
        )
        scripted = sorted({str(r.scripted) for r in group if r.scripted})
        if scripted:
            lines.append(
                f"  scripted stages: {', '.join(scripted)}: their times are estimated (simulated), not measurements"
            )
        figures = summaries(group, HEADLINE_METRICS)  # the turns that count found once: a fleet has many
        table = [
            (
                metric,
                _fmt(s.median, metric),
                _fmt(s.p90, metric),
                _fmt(s.minimum, metric),
                _fmt(s.maximum, metric),
                f"{s.n}/{s.turns}" + ("*" if s.partial else ""),
            )
            for metric, s in zip(HEADLINE_METRICS, figures, strict=True)
        ]
        lines.extend(_aligned([("metric", "median", "P90", "min", "max", "n"), *table]))
        by_language = _error_rates(group)
        if by_language:
            lines.append("  asr_error_rate by language (median): " + ", ".join(by_language))
        if any(s.partial for s in figures):
            lines.append(
                "  * computed over fewer than all measured turns (failed turns have no latency;"
                " questions without expected keywords have no answer_quality)"
            )
    return "\n".join(lines)


# the metric's column, then the figures' (at least this wide, right-aligned, two spaces apart at the least:
# a fleet's "33331/33331" must not run into the max before it)
_WIDTHS = (32, 10, 10, 10, 10, 8)


def _aligned(table: list[tuple[str, ...]]) -> list[str]:
    widths = [max(least, *(len(cells[i]) + (i > 0) * 2 for cells in table)) for i, least in enumerate(_WIDTHS)]
    return [
        "  " + cells[0].ljust(widths[0]) + "".join(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        for cells in table
    ]


def _error_rates(rows: Sequence[TurnRow]) -> list[str]:
    """The recognition error rate per language: CER for Chinese, WER otherwise (measured turns with a reference)."""
    out = []
    for language in sorted({str(r.language) for r in rows if r.language}):
        same = [r for r in rows if r.language == language]
        s = summarize(same, "asr_error_rate")
        if s.median is not None:
            metric = next((str(r.asr_error_metric) for r in same if r.asr_error_metric), "")
            out.append(f"{language} {metric.upper()} {s.median:.2f} ({s.n}/{s.turns})")
    return out
