"""Section 2, the four segments (M2): queue, network, first-token inference, generation.

The client sees only the first-token wait (the first three together) and the generation;
the split comes from the server's own timings where it reports them. Where a scheduler
stands in front of a shared local model (condition B with ``[scheduler] concurrency``), the
queue is measured on the client side too: the turn's ``llm.queue`` spans (``queue_wait_ms``).
Whether that wait lies inside the first-token wait is read from the spans (the queue span
within its ``llm.call``, or ending before the call's request), never assumed; only inside it
is "first-token wait - queue" a meaningful estimate of network + first-token inference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.analysis.facts import Q_BEFORE, Q_INSIDE, Q_MIXED, placement
from pipeline.analysis.numbers import median
from pipeline.report import cells
from pipeline.report.compare import Stat, stat, stat_of
from pipeline.report.conditions import Condition, title
from pipeline.report.document import NOTE, Block, Heading, Paragraph, Table
from pipeline.report.load import Dataset
from pipeline.report.sections.base import ESTIMATED, MEASURED, Conditions, Context, header, row

SERVER_TIMINGS = ("server_queue_ms", "server_prompt_ms", "server_generation_ms")
INSIDE = "not measured (the client sees only the sum below)"
QUEUE = "queue_wait_ms"
NO_QUEUE = "- (no queue measured)"


@dataclass(frozen=True, slots=True)
class Segments:
    """Per turn, summed over the turn's LLM calls; medians over measured successful turns."""

    client_first_token: Stat  # queue + network + first-token inference, as the client sees them
    client_generation: Stat
    server_queue: Stat
    server_prompt: Stat  # first-token inference (prompt processing)
    server_generation: Stat
    network: Stat  # estimated: client first-token wait - server queue - server prompt
    queue: Stat  # measured by the client's scheduler (llm.queue spans), summed over the turn's calls

    @property
    def has_server(self) -> bool:
        return self.server_queue.n > 0 or self.server_prompt.n > 0 or self.server_generation.n > 0


def has_server_timings(cond: Condition) -> bool:
    return any(cond.values(metric).size for metric in SERVER_TIMINGS)


def network_values(cond: Condition) -> np.ndarray:
    """Per turn, the network estimate (client first-token wait - server queue - server prompt), sorted."""
    network = cond.turn_sum_column() - cond.column("server_queue_ms") - cond.column("server_prompt_ms")
    return np.sort(network[~np.isnan(network)])


def has_queue(cond: Condition) -> bool:
    return bool(cond.values(QUEUE).size)


def _after_queue(cond: Condition) -> np.ndarray:
    """Per turn, first-token wait - queue wait: network + first-token inference when the queue is inside."""
    rest = cond.turn_sum_column() - cond.column(QUEUE)
    return np.sort(rest[~np.isnan(rest)])


def condition_placement(data: Dataset, cond: Condition) -> str | None:
    """Where the queue waits of a condition's turns lie (None without any, or for rows not read from spans);
    ``cond`` grouped from ``data``."""
    return placement(data.queue_places(i) for i in cond.index)


def segments(cond: Condition) -> Segments:
    turns = len(cond.measured)
    return Segments(
        client_first_token=stat_of(cond.turn_sums(), 0.5, f"{cond.label}|turn_first_token_sum", turns),
        client_generation=stat(cond, "llm_generation_ms"),
        server_queue=stat(cond, "server_queue_ms"),
        server_prompt=stat(cond, "server_prompt_ms"),
        server_generation=stat(cond, "server_generation_ms"),
        network=stat_of(network_values(cond), 0.5, f"{cond.label}|network_estimate", turns),
        queue=stat(cond, QUEUE),
    )


def segment_tables(
    labels: Sequence[str], conds: Conditions, placements: dict[str, str | None] | None = None
) -> tuple[Table, Table]:
    """The client's and the server's view; ``placements`` (condition -> ``condition_placement``) says
    where a measured queue lies."""
    segs = {c: segments(cond) for c, cond in conds.items()}
    placements = placements or {}

    def client(pick: Callable[[Segments], Stat]) -> Callable[[Condition], str]:
        return lambda c: cells.stat(pick(segs[c.label]))

    def server(pick: Callable[[Segments], Stat]) -> Callable[[Condition], str]:
        def cell(c: Condition) -> str:
            if not segs[c.label].has_server:
                return f"{cells.NOT_MEASURED} (the server reported no timings)"
            return cells.stat(pick(segs[c.label]))

        return cell

    inside = [c for c, cond in conds.items() if has_queue(cond) and placements.get(c) == Q_INSIDE]
    client_rows = (
        _queue_row(labels, conds, segs),
        row("network", labels, conds, lambda c: INSIDE, "-"),
        row("first-token inference", labels, conds, lambda c: INSIDE, "-"),
        row(
            "first-token wait = queue + network + first-token inference (ms)",
            labels,
            conds,
            client(lambda s: s.client_first_token),
            MEASURED,
        ),
        *((_after_queue_row(labels, conds, inside),) if inside else ()),
        row(
            "generation (first token to end of call, ms)",
            labels,
            conds,
            client(lambda s: s.client_generation),
            MEASURED,
        ),
    )
    server_rows = (
        row("queue (ms)", labels, conds, server(lambda s: s.server_queue), f"{MEASURED} (server-reported)"),
        row(
            "network = client first-token wait - server queue - server prompt (ms)",
            labels,
            conds,
            server(lambda s: s.network),
            ESTIMATED,
        ),
        row(
            "first-token inference = prompt processing (ms)",
            labels,
            conds,
            server(lambda s: s.server_prompt),
            f"{MEASURED} (server-reported)",
        ),
        row("generation (ms)", labels, conds, server(lambda s: s.server_generation), f"{MEASURED} (server-reported)"),
    )
    caption = "Per turn, summed over the turn's LLM calls; median over measured successful turns."
    return (
        Table("segments-client", header("segment (client view)", labels), client_rows, caption),
        Table("segments-server", header("segment (server view)", labels), server_rows, caption),
    )


def _queue_row(labels: Sequence[str], conds: Conditions, segs: dict[str, Segments]) -> tuple[str, ...]:
    """M2's queue: measured where a scheduler stood in front of the model, inside the sum elsewhere."""
    queued = {c for c, cond in conds.items() if has_queue(cond)}
    if not queued:
        return row("queue", labels, conds, lambda c: INSIDE, "-")

    def cell(c: Condition) -> str:
        return cells.stat(segs[c.label].queue) if c.label in queued else INSIDE

    return row("queue (scheduler, ms)", labels, conds, cell, f"{MEASURED} (llm.queue spans)")


def _after_queue_row(labels: Sequence[str], conds: Conditions, inside: Sequence[str]) -> tuple[str, ...]:
    def cell(c: Condition) -> str:
        if c.label not in inside:
            return NO_QUEUE
        return cells.stat(stat_of(_after_queue(c), 0.5, f"{c.label}|after_queue", len(c.measured)))

    return row("network + first-token inference = first-token wait - queue (ms)", labels, conds, cell, ESTIMATED)


def queue_notes(conds: Conditions, placements: dict[str, str | None]) -> list[Paragraph]:
    """Where each measured queue lies against the first-token wait, in words computed from the spans."""
    out = []
    for label, cond in conds.items():
        if not has_queue(cond):
            continue
        wait = stat(cond, QUEUE)
        turns = cells.count(wait.n, wait.turns)
        said = f"{title(label)}: queue measured, median {cells.ms(wait.value)} ms per turn ({turns} turns)"
        where = placements.get(label)
        if where == Q_INSIDE:
            said += "; it lies inside the first-token wait (each llm.queue span within its LLM call)."
        elif where == Q_BEFORE:
            said += (
                "; it ends before its call's request, so it is not inside the first-token wait: the turn's LLM "
                "time is queue + first-token wait + generation."
            )
        elif where == Q_MIXED:
            said += "; its llm.queue spans lie partly inside, partly outside their LLM calls."
        else:
            said += "; where it lies against the first-token wait could not be read (no spans behind these rows)."
        out.append(Paragraph(said, NOTE))
    return out


def _tokens(cond: Condition, metric: str) -> str:
    values = cond.values(metric)
    if len(values) == 0:
        return f"{cells.NOT_MEASURED} (not reported)"
    return f"{median(values):.0f} · {cells.count(len(values), len(cond.measured))}"


def _evaluated(cond: Condition) -> str:
    column = cond.column("prompt_tokens") - cond.column("prompt_cached_tokens")
    known = column[~np.isnan(column)]
    return f"{median(known):.0f}" if len(known) else f"{cells.NOT_MEASURED} (not reported)"


def prompt_table(labels: Sequence[str], conds: Conditions) -> Table:
    """The state that decides a first token: how much of the prompt was already in the cache."""
    rows = (
        row("first token, median (ms)", labels, conds, lambda c: cells.stat(stat(c, "first_token_ms")), MEASURED),
        row("prompt tokens, median", labels, conds, lambda c: _tokens(c, "prompt_tokens"), MEASURED),
        row("of which cached, median", labels, conds, lambda c: _tokens(c, "prompt_cached_tokens"), MEASURED),
        row("of which evaluated, median", labels, conds, _evaluated, MEASURED),
    )
    caption = (
        "The first LLM call of each measured successful turn: cached prompt tokens were not evaluated again "
        "([llm] prompt_cache: off, prefix or carry; a cloud reports its own cache, or nothing)."
    )
    return Table("prompt-cache", header("prompt (first call)", labels), rows, caption)


def section(ctx: Context) -> list[Block]:
    out: list[Block] = [Heading(2, "2. Four segments (M2)")]
    if ctx.refused(out):
        return out
    out.append(
        Paragraph(
            "End to end = queue + network + first-token inference + generation. The client sees only the "
            "first-token wait (the first three together) and the generation; the split needs the server's own "
            "timings (llama.cpp `timings`, server-side spans)."
        )
    )
    placements = {label: condition_placement(ctx.data, cond) for label, cond in ctx.conds.items()}
    out.extend(segment_tables(ctx.labels, ctx.conds, placements))
    out.extend(queue_notes(ctx.conds, placements))
    out.append(prompt_table(ctx.labels, ctx.conds))
    out.extend(_without_server(ctx.conds))
    return out


def _without_server(conds: Conditions) -> list[Paragraph]:
    """What stays inside the client's sum where the server gave no timings (the queue, unless measured)."""
    out = []
    for queued in (False, True):
        without = [
            title(c)
            for c, cond in conds.items()
            if cond.ok and not has_server_timings(cond) and has_queue(cond) == queued
        ]
        inside = "network and first-token inference" if queued else "queue, network and first-token inference"
        if without:
            out.append(
                Paragraph(
                    f"No server timings from {', '.join(without)}: {inside} cannot be separated from the client "
                    "alone, so they are not measured there.",
                    NOTE,
                )
            )
    return out
