"""Dataset -> report document: the sections in order, each saying what it could not compute."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.report import bootstrap, cells, compare, drift, plots, readings, settings, tables
from pipeline.report.cited import CAVEAT
from pipeline.report.conditions import KNOWN, Condition, group, ordered_labels, title
from pipeline.report.document import NOTE, WARNING, Block, Bullets, Document, Figure, Heading, Paragraph, Table
from pipeline.report.integrity import run_facts, temperatures
from pipeline.report.load import Dataset
from pipeline.report.waterfall import Waterfall, bars, representative

TITLE = "Voice pipeline latency report"
MAX_PROBLEMS = 20

Pair = tables.Pair


def comparison_pairs(conds: dict[str, Condition]) -> list[Pair]:
    """Every other measured condition against A (or, without A, the first measured one); B' against B."""
    present = [label for label, c in conds.items() if c.measured]
    if not present:
        return []
    base = "A" if "A" in present else present[0]
    pairs = [(label, base) for label in present if label != base]
    if "B" in present and "B'" in present and base != "B":
        pairs.append(("B'", "B"))
    return pairs


class Builder:
    """The report's sections, each a list of blocks; every section notes what it could not compute
    in ``incomplete`` (the status line at the top)."""

    def __init__(self, data: Dataset, draw: bool) -> None:
        self.data = data
        self.draw = draw
        self.conds = group(data)
        self.labels = ordered_labels(list(self.conds))
        self.facts = run_facts(data.rows, data.runs)
        self.check = settings.check(list(data.runs.values()), data.rows)
        self.drifts = drift.check_runs(data.rows)
        self.pairs = comparison_pairs(self.conds) if self.check.comparable else []
        self.simulated = [f for f in self.facts if f.scripted]
        self.incomplete: list[str] = []

    # --- sections --------------------------------------------------------------------------

    def result(self) -> list[Block]:
        out: list[Block] = [Heading(2, "1. Result (M23)")]
        if not self.check.comparable:
            out.append(Paragraph("Comparison refused (M11): see Integrity. Each run alone:", WARNING))
            out.extend(self._per_run_tables())
            return out
        table = tables.result_table(self.labels, self.conds)
        out.append(table)
        empty = _not_measured(table)
        if empty:
            count = sum(len(table.rows) if rows == [EVERY] else len(rows) for rows in empty.values())
            self.incomplete.append(f"{count} cell(s) of the result table not measured")
            listed = "; ".join(f"{column}: {', '.join(rows)}" for column, rows in empty.items())
            out.append(Paragraph(f"Not measured (left empty, never filled from a cited source): {listed}.", WARNING))
        if any(cells.PARTIAL in cell for row in table.rows for cell in row):
            out.append(
                Paragraph(
                    f"{cells.PARTIAL} marks a figure computed over fewer than all measured turns: failed turns "
                    "have no latency, so the figure describes the successful turns only (M7).",
                    WARNING,
                )
            )
        return out

    def _per_run_tables(self) -> list[Block]:
        out: list[Block] = []
        by_run: dict[str, Dataset] = {}
        for i, row in enumerate(self.data.rows):
            run = str(row.get("run_id"))
            sub = by_run.setdefault(run, Dataset([], [], [], None, {}, self.data.source))
            sub.rows.append(row)
            sub.sentence_ms.append(self.data.sentence_ms[i])
            sub.failed_stages.append(self.data.failed_stages[i])
        for run, sub in by_run.items():
            cond = next(iter(group(sub).values()))
            table = tables.result_table([cond.label], {cond.label: cond})
            out.append(Table(f"run-{run}", (f"run {run}", *table.headers[1:]), table.rows, table.caption))
        return out

    def segments(self) -> list[Block]:
        out: list[Block] = [Heading(2, "2. Four segments (M2)")]
        if not self._comparable(out):
            return out
        out.append(
            Paragraph(
                "End to end = queue + network + first-token inference + generation. The client sees only the "
                "first-token wait (the first three together) and the generation; the split needs the server's own "
                "timings (llama.cpp `timings`, server-side spans)."
            )
        )
        client, server = tables.segment_tables(self.labels, self.conds)
        out.extend([client, server])
        without = [title(c) for c, cond in self.conds.items() if cond.ok and not compare.has_server_timings(cond)]
        if without:
            out.append(
                Paragraph(
                    f"No server timings from {', '.join(without)}: queue, network and first-token inference cannot "
                    "be separated from the client alone, so they are not measured there.",
                    NOTE,
                )
            )
        return out

    def amplification(self) -> list[Block]:
        out: list[Block] = [Heading(2, "3. Per-sentence first tokens and amplification (M3)")]
        if not self._comparable(out):
            return out
        out.append(tables.sentence_table(self.labels, self.conds))
        if self.pairs:
            out.append(tables.amplification_table(self.pairs, self.conds))
        else:
            out.append(Paragraph(self._no_pairs("The amplification"), NOTE))
        return out

    def dilution(self) -> list[Block]:
        out: list[Block] = [Heading(2, "4. Dilution (M17)")]
        if not self._comparable(out):
            return out
        if not self.pairs:
            out.append(Paragraph(self._no_pairs("Dilution"), NOTE))
            return out
        out.append(tables.dilution_table(self.pairs, self.conds))
        out.append(Bullets(tuple(readings.dilution_sentence(self.conds[x], self.conds[b]) for x, b in self.pairs)))
        return out

    def outcomes(self) -> list[Block]:
        out: list[Block] = [Heading(2, "5. Outcomes, conclusion and boundaries (M16, M22, M21)")]
        if self.check.comparable:
            against_a = [(x, b) for x, b in self.pairs if b == "A"]
            if against_a:
                out.append(readings.outcome_table(against_a, self.conds))
            else:
                out.append(Paragraph("The four outcomes read B against A; A (cloud) was not measured.", NOTE))
            out.append(Paragraph(readings.offline_reading(self.conds)))
            if self.data.offline_verdicts:
                out.append(Bullets(tuple(f"B' network check: {v}" for v in self.data.offline_verdicts)))
            out.append(Heading(3, "Conclusion"))
            if self.pairs:
                for x, b in self.pairs:
                    simulated = any(f.condition in (x, b) for f in self.simulated)  # this pair's runs only
                    out.append(Paragraph(readings.conclusion(self.conds[x], self.conds[b], simulated)))
            else:
                out.append(Paragraph(self._no_pairs("A conclusion"), NOTE))
        else:
            out.append(Paragraph("No conclusion: the comparison was refused (M11), see Integrity.", WARNING))
        out.append(Heading(3, "Boundaries (M21)"))
        out.append(Bullets(readings.boundaries(self.conds)))
        return out

    def integrity(self) -> list[Block]:
        out: list[Block] = [Heading(2, "6. Integrity"), Heading(3, "Runs, failures and warm-up (M6, M7)")]
        out.append(tables.runs_table(self.facts))
        missing = [f for f in self.facts if f.expected is not None and f.expected != f.turns]
        for f in missing:
            self.incomplete.append(f"run {f.run_id}: {f.turns} of {f.expected} expected turns found")
            out.append(
                Paragraph(
                    f"Run {f.run_id}: its settings ask for {f.expected} turns, the traces hold {f.turns} "
                    "(a run stopped early, or unreadable trace lines): its figures cover what was found.",
                    WARNING,
                )
            )
        out.append(tables.warmup_table(self.facts))
        out.extend(self._settings_blocks())
        out.append(Heading(3, "Temperature and drift (M9, M20)"))
        out.append(tables.temperature_table(self.labels, self.conds))
        if not any(temperatures(c) for c in self.conds.values()):
            out.append(
                Paragraph("No temperature sensor reading in any turn (temp_c empty): never invented (M9).", NOTE)
            )
        out.append(tables.drift_table(self.drifts))
        for d in self.drifts:
            if d.flagged:
                out.append(
                    Paragraph(
                        f"Run {d.run_id} drifts upward in {d.metric}: rho {d.rho:+.2f}, second half "
                        f"{100 * (d.rise or 0):+.1f}% slower than the first (M20). Check temperature and background "
                        "load; its medians mix a cool and a hot device.",
                        WARNING,
                    )
                )
        out.extend(self._problems())
        return out

    def _settings_blocks(self) -> list[Block]:
        out: list[Block] = [Heading(3, "Config identity (M11)")]
        if self.check.differences:
            out.append(tables.settings_table(self.check))
        ids = sorted({cid for f in self.facts for cid in f.config_ids})
        if self.check.comparable and len(ids) <= 1:
            out.append(Paragraph(f"One configuration ({', '.join(ids) or 'none'}): nothing to check."))
        elif self.check.comparable:
            out.append(Paragraph(f"Comparable: the {len(ids)} config_ids differ only in what defines the condition."))
        else:
            self.incomplete.append("comparison refused (M11)")
            out.append(Paragraph("Comparison refused (M11):", WARNING))
            out.append(Bullets(self.check.reasons, WARNING))
        if self.check.warnings:
            out.append(Bullets(self.check.warnings, WARNING))
        return out

    def _problems(self) -> list[Block]:
        out: list[Block] = []
        problems = self.data.problems
        if problems:
            self.incomplete.append(f"{len(problems)} read problem(s)")
            shown = problems[:MAX_PROBLEMS]
            more = [f"... and {len(problems) - MAX_PROBLEMS} more"] if len(problems) > MAX_PROBLEMS else []
            out.append(Heading(3, "What could not be read"))
            out.append(
                Paragraph(
                    "These lines or spans were left out; everything else was computed from what was read:", WARNING
                )
            )
            out.append(Bullets((*shown, *more), WARNING))
        if self.data.notes:
            out.append(Bullets(tuple(self.data.notes), NOTE))
        return out

    def uncertainty(self) -> list[Block]:
        out: list[Block] = [Heading(2, "7. Uncertainty")]
        if not self._comparable(out):
            return out
        if not self.conds:
            out.append(Paragraph("Nothing measured.", NOTE))
            return out
        out.append(tables.uncertainty_table(self.labels, self.conds))
        if self.pairs:
            out.append(tables.differences_table(self.pairs, self.conds))
        return out

    def figures(self) -> list[Block]:
        out: list[Block] = [Heading(2, "8. Plots")]
        if not self.draw:
            out.append(Paragraph("Plots were not drawn (--no-plots).", NOTE))
            return out
        if not self.data.rows:
            out.append(Paragraph("Nothing to plot: no turns.", NOTE))
            return out
        conds = [c for c in self.conds.values() if c.measured]
        if self.check.comparable:
            out.append(
                Figure("cdf", plots.cdf_plot(conds), "CDFs of first token and whole turn per condition.", "CDF plots")
            )
            out.extend(self._waterfalls())
        runs = [
            (f.run_id, f.condition, [r for r in self.data.rows if str(r.get("run_id")) == f.run_id]) for f in self.facts
        ]
        out.append(
            Figure(
                "order",
                plots.order_plot(runs, self.labels, self.drifts),
                "Latency against run order per run, with temperature where recorded (M20).",
                "latency against run order",
            )
        )
        if self.check.comparable:
            out.append(
                Figure(
                    "sentences",
                    plots.sentence_box_plot(conds),
                    "Per-sentence first-token times per condition.",
                    "box plots",
                )
            )
        return out

    def _waterfalls(self) -> list[Block]:
        out: list[Block] = []
        if self.data.turns is None:
            return [Paragraph("No waterfall: these rows were not read from spans.", NOTE)]
        for label, cond in self.conds.items():
            i = representative(cond, self.data.rows)
            if i is None:
                continue
            row = self.data.rows[i]
            name = f"{title(label)}: run {row.get('run_id')}, {row.get('question_id')} round {row.get('round')}"
            w = Waterfall(f"Representative turn, {name}", tuple(bars(self.data.turns[i])))
            key = "waterfall-" + ("Bp" if label == "B'" else "".join(ch if ch.isalnum() else "_" for ch in label))
            out.append(
                Figure(
                    key,
                    plots.waterfall_plot(w),
                    f"Waterfall of one representative turn, {name}: its whole turn lies between the quartiles, and of "
                    "those it has the most sentences (to show the overlap), then the nearest the median.",
                    "waterfall",
                )
            )
        return out

    def cited(self) -> list[Block]:
        return [
            Heading(2, "Cited reference (not measured here)"),
            Paragraph("Cited figures, from someone else's document; they never fill a measured cell (M12).", NOTE),
            tables.cited_table(),
            Paragraph(CAVEAT, NOTE),
        ]

    def method(self) -> list[Block]:
        return [
            Heading(2, "How the figures were computed"),
            Bullets(
                (
                    "Rows are recomputed from the trace spans alone (pipeline.analysis); bench.csv beside this report "
                    "holds exactly those rows.",
                    "Statistics use measured turns only: warm-up (round 1) excluded, failed turns counted in the "
                    "success rate and absent from latency figures.",
                    f"Intervals: percentile bootstrap, {bootstrap.RESAMPLES} resamples, 95%, seed {bootstrap.SEED}; "
                    "differences resample both conditions independently.",
                    "Outcomes (M16): " + readings.OUTCOME_RULES,
                    f"Drift (M20): Spearman rho of latency (relative to the same question's median) against run order "
                    f">= {drift.RHO_FLAG} and second-half median >= {100 * drift.RISE_FLAG:.0f}% above the first half; "
                    f"needs {drift.MIN_TURNS} successful turns over {drift.MIN_ROUNDS} measured rounds.",
                    "Config identity (M11): conditions may differ only in "
                    + ", ".join(settings.CONDITION_DEFINING)
                    + ".",
                )
            ),
        ]

    # --- helpers ---------------------------------------------------------------------------

    def _comparable(self, out: list[Block]) -> bool:
        if not self.check.comparable:
            out.append(Paragraph("Refused (M11): see Integrity.", WARNING))
        return self.check.comparable

    def _no_pairs(self, what: str) -> str:
        measured = [title(c) for c, cond in self.conds.items() if cond.measured]
        if not measured:
            return f"{what} needs two measured conditions; nothing was measured."
        return f"{what} needs two measured conditions; measured: {', '.join(measured)}."

    def header(self) -> list[Block]:
        d = self.data
        out: list[Block] = [
            Heading(1, TITLE),
            Paragraph(
                f"Source: {d.source or '-'} ({len(d.files)} file(s)). {len(d.rows)} turn(s) in "
                f"{len(self.facts)} run(s), every figure computed from the traces alone."
            ),
        ]
        if not d.rows:
            self.incomplete.append("no turns found")
            out.append(Paragraph("No turns were found: nothing was measured, every figure below is empty.", WARNING))
        if self.simulated:
            runs = ", ".join(f"{f.run_id} ({f.condition}: {f.scripted})" for f in self.simulated)
            out.append(
                Paragraph(
                    f"SIMULATED: scripted stages in run(s) {runs}: their latencies are configured, not measured. "
                    "No conclusion about real models may be drawn from these runs.",
                    WARNING,
                )
            )
        virtual = [f.run_id for f in self.facts if "virtual" in f.clock]
        if virtual:
            out.append(Paragraph(f"Virtual clock (simulated time) in run(s): {', '.join(virtual)}.", WARNING))
        if not self.check.comparable:
            out.append(
                Paragraph(
                    "COMPARISON REFUSED (M11): "
                    + " ".join(r + "." for r in self.check.reasons)
                    + " Report the runs separately, or "
                    "re-run them with matching settings.",
                    WARNING,
                )
            )
        extra = [title(c) for c in self.conds if c not in KNOWN]
        if extra:
            out.append(Paragraph(f"Other conditions shown as extra columns: {', '.join(extra)}.", NOTE))
        return out


def build(data: Dataset, draw: bool = True) -> Document:
    b = Builder(data, draw)
    body: list[Block] = []
    for section in (b.result, b.segments, b.amplification, b.dilution, b.outcomes, b.integrity, b.uncertainty):
        body.extend(section())
    body.extend(b.figures())
    body.extend(b.cited())
    body.extend(b.method())
    head = b.header()
    status = _status(b.incomplete)
    return Document(TITLE, (*head[:2], status, *head[2:], *body), not b.incomplete, b.check.comparable)


EVERY = "every figure"


def _not_measured(table: Table) -> dict[str, list[str]]:
    """Column -> the rows whose cell is not measured (``[EVERY]`` when all are)."""
    out: dict[str, list[str]] = {}
    for i, column in enumerate(table.headers[1:-1], start=1):
        rows = [row[0] for row in table.rows if row[i].startswith(cells.NOT_MEASURED)]
        if rows:
            out[column] = [EVERY] if len(rows) == len(table.rows) else rows
    return out


def _status(reasons: Sequence[str]) -> Paragraph:
    if not reasons:
        return Paragraph("Status: complete: every measured cell is filled from these runs.")
    unique = list(dict.fromkeys(reasons))
    return Paragraph("Status: INCOMPLETE (M12): " + "; ".join(unique) + ".", WARNING)
