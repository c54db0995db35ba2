"""Sections computed in forked children while this process computes the others (``started``).

The report is made on one core, and reading a fleet's trace files left the second one idle through
it: at 100,000 turns (``scripts/bench_report.py``) the plots (drawing and PNG encoding) and the
critical paths (re-reading and re-timing a sample of turns) were about half of the report's time
after its context. A section run apart is forked once the context is made, so it sees what it
would have seen in this process, and its blocks (PNG bytes, tables, words) come back pickled
(``parallel.Aside``); what it notes as incomplete is added to ``ctx.incomplete`` in its place in
the order, so the document is the one a single process makes. Only sections that change nothing
else in the context may be run apart (``build.APART``: they fill caches only they read).

For a small report (under ``FORK_ROWS`` turns), where forking is not safe (a thread running:
``parallel.can_fork``) or where the child fails, the section is computed here, in order, as it
would be without this.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from pipeline.analysis.parallel import Aside
from pipeline.report.document import Block
from pipeline.report.sections.base import Context, Section

# Below this many turns the sections take less time than a child's start and its matplotlib's first figure.
FORK_ROWS = 5_000

Result = tuple[list[Block], list[str]]  # a section's blocks, and what it added to ``ctx.incomplete``


def worth_forking(ctx: Context) -> bool:
    return len(ctx.data.facts) >= FORK_ROWS


def _computed(section: Section, ctx: Context) -> Result:
    """The section's blocks and its notes, taken back out of ``ctx.incomplete`` (``started`` adds them in
    order, wherever the section was computed)."""
    before = len(ctx.incomplete)
    blocks = section(ctx)
    noted = ctx.incomplete[before:]
    del ctx.incomplete[before:]
    return blocks, noted


@contextmanager
def started(apart: Sequence[Section], ctx: Context) -> Iterator[Callable[[Section], list[Block]]]:
    """Each of ``apart`` started in a forked child (for a large report, where forking is safe); yields
    the function that gives any section's blocks, in the document's order: a child's answer (its notes
    added to ``ctx.incomplete`` now), else the section computed here. Every child is waited for on leaving."""
    fork = worth_forking(ctx)
    forked = {section: Aside(functools.partial(_computed, section, ctx), fork) for section in apart}

    def blocks(section: Section) -> list[Block]:
        if section not in forked:
            return section(ctx)
        out, incomplete = forked[section].result()
        ctx.incomplete.extend(incomplete)
        return out

    try:
        yield blocks
    finally:
        for child in forked.values():
            child.close()
