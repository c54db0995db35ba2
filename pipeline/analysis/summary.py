"""The end-of-run summary table: median, P90, min, max and success rate per run (M6-M8)."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.analysis.numbers import Row, measured
from pipeline.analysis.stats import HEADLINE_METRICS, group_rows, success_rate, summaries, summarize


def _fmt(value: float | None, metric: str) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if metric.endswith("_ms") or metric in ("llm_calls", "sentences") else f"{value:.2f}"


def summary_table(rows: Sequence[Row]) -> str:
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
        scripted = sorted({str(r.get("scripted")) for r in group if r.get("scripted")})
        if scripted:
            lines.append(
                f"  scripted stages: {', '.join(scripted)}: their times are estimated (simulated), not measurements"
            )
        lines.append(f"  {'metric':<32}{'median':>10}{'P90':>10}{'min':>10}{'max':>10}{'n':>8}")
        figures = summaries(group, HEADLINE_METRICS)  # the turns that count found once: a fleet has many
        for metric, s in zip(HEADLINE_METRICS, figures, strict=True):
            n = f"{s.n}/{s.turns}" + ("*" if s.partial else "")
            lines.append(
                f"  {metric:<32}{_fmt(s.median, metric):>10}{_fmt(s.p90, metric):>10}"
                f"{_fmt(s.minimum, metric):>10}{_fmt(s.maximum, metric):>10}{n:>8}"
            )
        by_language = _error_rates(group)
        if by_language:
            lines.append("  asr_error_rate by language (median): " + ", ".join(by_language))
        if any(s.partial for s in figures):
            lines.append(
                "  * computed over fewer than all measured turns (failed turns have no latency;"
                " questions without expected keywords have no answer_quality)"
            )
    return "\n".join(lines)


def _error_rates(rows: Sequence[Row]) -> list[str]:
    """The recognition error rate per language: CER for Chinese, WER otherwise (measured turns with a reference)."""
    out = []
    for language in sorted({str(r.get("language")) for r in rows if r.get("language")}):
        same = [r for r in rows if r.get("language") == language]
        s = summarize(same, "asr_error_rate")
        if s.median is not None:
            metric = next((str(r.get("asr_error_metric")) for r in same if r.get("asr_error_metric")), "")
            out.append(f"{language} {metric.upper()} {s.median:.2f} ({s.n}/{s.turns})")
    return out
