"""Sections computed in forked children (``report.apart``) give the document one process gives.

The whole report of the experiment fixture is built with its run checks and slow sections forked
and without,
and the documents (every block, every PNG's bytes, the status line) must be the same; a section's
notes made in a child reach the status line in the section's place; a child that dies costs
time, not the section, and leaves no answer file behind.

Forking is only done while one thread runs (``parallel.can_fork``); in the whole suite other tests'
model threads are still alive, so a test that must fork runs itself again in a fresh interpreter
(``forking``), where it does fork.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.analysis import parallel
from pipeline.report import apart, build
from pipeline.report.document import Block, Paragraph
from pipeline.report.load import load_paths
from pipeline.report.sections import base
from pipeline.report.sections.base import Context
from tests.paths import REPO_ROOT, TEST_DATA

EXPERIMENT = TEST_DATA / "report" / "experiment"
PARENT = os.getpid()
FRESH = "LAB_TEST_APART_FRESH"


@pytest.fixture
def forking(request: pytest.FixtureRequest) -> bool:
    """True where this process may fork; else the test, run again in a fresh interpreter, has passed there
    (False: the caller returns)."""
    if parallel.can_fork():
        return True
    assert not os.environ.get(FRESH), "a fresh interpreter runs other threads: nothing would fork"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", request.node.nodeid]
    root = REPO_ROOT
    done = subprocess.run(cmd, cwd=root, env={**os.environ, FRESH: "1"}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return False


def test_the_report_with_sections_forked_is_the_one_made_in_one_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, forking: bool
) -> None:
    if not forking:
        return
    monkeypatch.setattr(parallel, "spill_root", lambda: str(tmp_path))
    monkeypatch.setattr(apart, "FORK_ROWS", 10**9)
    monkeypatch.setattr(base, "CHECKS_FORK_ROWS", 10**9)
    alone = build.build(load_paths([EXPERIMENT]), draw=True)
    monkeypatch.setattr(apart, "FORK_ROWS", 0)
    monkeypatch.setattr(base, "CHECKS_FORK_ROWS", 0)
    forked = build.build(load_paths([EXPERIMENT]), draw=True)
    assert forked == alone
    assert forked.figures() and any(f.key == "critical-path" for f in forked.figures())
    assert list(tmp_path.iterdir()) == []  # each child's answer file removed once read


def _where(ctx: Context) -> list[Block]:
    ctx.incomplete.append(f"noted in {os.getpid()}")
    return [Paragraph(str(os.getpid()))]


def _dies_in_a_child(ctx: Context) -> list[Block]:
    if os.getpid() != PARENT:
        os._exit(3)  # as the kernel's out-of-memory killer would end it
    return _where(ctx)


@pytest.fixture
def ctx(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Context:
    monkeypatch.setattr(parallel, "spill_root", lambda: str(tmp_path))
    monkeypatch.setattr(apart, "FORK_ROWS", 0)
    return Context(load_paths([EXPERIMENT]), draw=False)


def test_a_forked_sections_notes_reach_the_status_in_its_place(ctx: Context, tmp_path: Path, forking: bool) -> None:
    if not forking:
        return
    before = list(ctx.incomplete)
    with apart.started([_where], ctx) as blocks:
        ctx.incomplete.append("an earlier section's note")
        (block,) = blocks(_where)
    assert isinstance(block, Paragraph) and int(block.text) != PARENT  # computed in a child
    assert ctx.incomplete == [*before, "an earlier section's note", f"noted in {block.text}"]
    assert list(tmp_path.iterdir()) == []


def test_a_child_that_dies_costs_time_not_the_section(ctx: Context, tmp_path: Path, forking: bool) -> None:
    if not forking:
        return
    with apart.started([_dies_in_a_child], ctx) as blocks:
        (block,) = blocks(_dies_in_a_child)
    assert isinstance(block, Paragraph) and int(block.text) == PARENT  # computed here instead
    assert ctx.incomplete[-1] == f"noted in {PARENT}"
    assert list(tmp_path.iterdir()) == []


def test_a_small_report_forks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    context = Context(load_paths([EXPERIMENT]), draw=False)
    assert len(context.data.facts) < apart.FORK_ROWS
    with apart.started([_where], context) as blocks:
        (block,) = blocks(_where)
    assert isinstance(block, Paragraph) and int(block.text) == PARENT


def _dies_in_a_child_too(rows: object, runs: object) -> object:
    if os.getpid() != PARENT:
        os._exit(3)
    return _checks(rows, runs)  # type: ignore[arg-type]


_checks = base._checks


def test_run_checks_whose_child_dies_are_made_here(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, forking: bool
) -> None:
    if not forking:
        return
    monkeypatch.setattr(parallel, "spill_root", lambda: str(tmp_path))
    want = Context(load_paths([EXPERIMENT]), draw=False)
    monkeypatch.setattr(base, "CHECKS_FORK_ROWS", 0)
    monkeypatch.setattr(base, "_checks", _dies_in_a_child_too)
    got = Context(load_paths([EXPERIMENT]), draw=False)
    assert (got.check, got.run_summaries, got.drifts) == (want.check, want.run_summaries, want.drifts)
    assert list(tmp_path.iterdir()) == []
