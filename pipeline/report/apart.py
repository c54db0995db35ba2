"""Sections computed in a forked process while this one computes the others (``started``).

The report is made on one core, and reading a fleet's trace files left the second one idle through
it: at 100,000 turns (``scripts/bench_report.py``) the plots (drawing and PNG encoding) and the
critical paths (re-reading and re-timing a sample of turns) were about half of the report's time.
A section run apart is forked once the context is made, so it sees what it would have seen in
this process, and its blocks (PNG bytes, tables, words) come back pickled through a file; what
it notes as incomplete is added to ``ctx.incomplete`` at its place in the order, so the document
is the one a single process makes. Only sections that change nothing else in the context may
be run apart (each of ``build.APART``: they fill caches only they read).

For a small report (under ``FORK_ROWS`` turns), where forking is not safe (a thread running:
``parallel.can_fork``) or where the child fails, the section is computed here, in order, as it
would be without this.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from pipeline.analysis.parallel import can_fork, spill_root
from pipeline.report.document import Block
from pipeline.report.sections.base import Context, Section

# Below this many turns the sections take less time than a child's start and its matplotlib's first figure.
FORK_ROWS = 5_000

Result = tuple[list[Block], list[str]]  # a section's blocks, and what it added to ``ctx.incomplete``


class _Forked:
    """One section computing in a forked child; ``blocks`` waits for it (or computes it here)."""

    def __init__(self, section: Section, ctx: Context) -> None:
        self.section = section
        fd, self.path = tempfile.mkstemp(prefix="report-section-", suffix=".pickle", dir=spill_root())
        os.close(fd)
        self.pid = os.fork()
        if self.pid == 0:  # the child: its answer to the file, then gone without the interpreter's teardown
            status = 1
            try:
                _write(self.path, _computed(section, ctx))
                status = 0
            finally:
                os._exit(status)
        self.done: Result | None = None

    def wait(self) -> Result | None:
        """The child's answer (None where it failed), its file removed."""
        if self.done is None:
            _, status = os.waitpid(self.pid, 0)
            try:
                if os.waitstatus_to_exitcode(status) == 0:
                    with open(self.path, "rb") as fh:
                        self.done = pickle.load(fh)  # written by our own child, in a folder only this user can read
            finally:
                os.unlink(self.path)
        return self.done


def _worth_it(ctx: Context) -> bool:
    return len(ctx.data.facts) >= FORK_ROWS and can_fork()


def _computed(section: Section, ctx: Context) -> Result:
    before = len(ctx.incomplete)
    blocks = section(ctx)
    return blocks, ctx.incomplete[before:]


def _write(path: str, result: Result) -> None:
    with open(path, "wb") as fh:
        pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)


@contextmanager
def started(apart: Sequence[Section], ctx: Context) -> Iterator[Callable[[Section], list[Block]]]:
    """Each of ``apart`` started in a forked child (where forking is safe); yields the function that
    gives any section's blocks, in the document's order: a child's answer (its notes added to
    ``ctx.incomplete`` now), else the section computed here. Every child is waited for on leaving."""
    forked = {section: _Forked(section, ctx) for section in apart} if _worth_it(ctx) else {}

    def blocks(section: Section) -> list[Block]:
        found = forked[section].wait() if section in forked else None
        if found is None:
            return section(ctx)  # not run apart, or its child failed: computed here, raising what it raises
        out, incomplete = found
        ctx.incomplete.extend(incomplete)
        return out

    try:
        yield blocks
    finally:
        for child in forked.values():
            child.wait()
