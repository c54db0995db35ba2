"""Section 2, the four segments (M2): queue, network, first-token inference, generation.

The client sees only the first-token wait (the first three together) and the generation;
the split comes from the server's own timings where it reports them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.report import cells
from pipeline.report.compare import Stat, stat, stat_of
from pipeline.report.conditions import Condition, title
from pipeline.report.document import NOTE, Block, Heading, Paragraph, Table
from pipeline.report.sections.base import ESTIMATED, MEASURED, Conditions, Context, header, row

SERVER_TIMINGS = ("server_queue_ms", "server_prompt_ms", "server_generation_ms")
INSIDE = "not measured (the client sees only the sum below)"


@dataclass(frozen=True, slots=True)
class Segments:
    """Per turn, summed over the turn's LLM calls; medians over measured successful turns."""

    client_first_token: Stat  # queue + network + first-token inference, as the client sees them
    client_generation: Stat
    server_queue: Stat
    server_prompt: Stat  # first-token inference (prompt processing)
    server_generation: Stat
    network: Stat  # estimated: client first-token wait - server queue - server prompt

    @property
    def has_server(self) -> bool:
        return self.server_queue.n > 0 or self.server_prompt.n > 0 or self.server_generation.n > 0


def has_server_timings(cond: Condition) -> bool:
    return any(cond.values(metric).size for metric in SERVER_TIMINGS)


def _network(cond: Condition) -> np.ndarray:
    network = cond.turn_sum_column() - cond.column("server_queue_ms") - cond.column("server_prompt_ms")
    return np.sort(network[~np.isnan(network)])


def segments(cond: Condition) -> Segments:
    turns = len(cond.measured)
    return Segments(
        client_first_token=stat_of(cond.turn_sums(), 0.5, f"{cond.label}|turn_first_token_sum", turns),
        client_generation=stat(cond, "llm_generation_ms"),
        server_queue=stat(cond, "server_queue_ms"),
        server_prompt=stat(cond, "server_prompt_ms"),
        server_generation=stat(cond, "server_generation_ms"),
        network=stat_of(_network(cond), 0.5, f"{cond.label}|network_estimate", turns),
    )


def segment_tables(labels: Sequence[str], conds: Conditions) -> tuple[Table, Table]:
    segs = {c: segments(cond) for c, cond in conds.items()}

    def client(pick: Callable[[Segments], Stat]) -> Callable[[Condition], str]:
        return lambda c: cells.stat(pick(segs[c.label]))

    def server(pick: Callable[[Segments], Stat]) -> Callable[[Condition], str]:
        def cell(c: Condition) -> str:
            if not segs[c.label].has_server:
                return f"{cells.NOT_MEASURED} (the server reported no timings)"
            return cells.stat(pick(segs[c.label]))

        return cell

    client_rows = (
        row("queue", labels, conds, lambda c: INSIDE, "-"),
        row("network", labels, conds, lambda c: INSIDE, "-"),
        row("first-token inference", labels, conds, lambda c: INSIDE, "-"),
        row(
            "first-token wait = queue + network + first-token inference (ms)",
            labels,
            conds,
            client(lambda s: s.client_first_token),
            MEASURED,
        ),
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


def _tokens(cond: Condition, metric: str) -> str:
    values = cond.values(metric)
    if len(values) == 0:
        return f"{cells.NOT_MEASURED} (not reported)"
    return f"{float(np.median(values)):.0f} · {cells.count(len(values), len(cond.measured))}"


def _evaluated(cond: Condition) -> str:
    column = cond.column("prompt_tokens") - cond.column("prompt_cached_tokens")
    known = column[~np.isnan(column)]
    return f"{float(np.median(known)):.0f}" if len(known) else f"{cells.NOT_MEASURED} (not reported)"


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
    out.extend(segment_tables(ctx.labels, ctx.conds))
    out.append(prompt_table(ctx.labels, ctx.conds))
    without = [title(c) for c, cond in ctx.conds.items() if cond.ok and not has_server_timings(cond)]
    if without:
        out.append(
            Paragraph(
                f"No server timings from {', '.join(without)}: queue, network and first-token inference cannot "
                "be separated from the client alone, so they are not measured there.",
                NOTE,
            )
        )
    return out
