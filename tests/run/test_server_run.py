"""The run behind a server: a finished turn whose records cannot be written (a full disk) stops the serving,
the first reason kept and the turn named; a session's history goes when the session ends; ``first_of``
returns with the first wait done and cancels the rest."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from pipeline.run import server_run
from pipeline.run.server_run import ServedTurns, first_of
from pipeline.tracing.timeline import TurnTimeline
from pipeline.transport.server.requests import TurnRequest


class _FullDisk:
    def __init__(self) -> None:
        self.tries = 0

    def emit_turn(self, *_args: Any) -> dict[str, Any]:
        self.tries += 1
        raise OSError(28, f"traces/run.jsonl: cannot be written (try {self.tries})")


def test_a_turn_that_cannot_be_recorded_stops_the_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_run, "turn_attributes", lambda *_a: {})
    run = SimpleNamespace(questions=SimpleNamespace(questions=()), config=SimpleNamespace(llm=SimpleNamespace()))
    rows: list[dict[str, Any]] = []
    turns = ServedTurns(run, _FullDisk(), rows.append, "en")  # type: ignore[arg-type]
    failed = TurnTimeline(start_ns=0, end_ns=1, error_type="timeout")
    turns.finished(TurnRequest("s", "auto", "en01", 1), failed)
    turns.finished(TurnRequest("s", "auto", "en01", 1), failed)
    assert turns.records_failed.is_set() and rows == []
    assert str(turns.unwritten) == "[Errno 28] traces/run.jsonl: cannot be written (try 1)"  # the first reason
    assert turns.unrecorded == ["en01 round 1 (failed timeout)"] * 2  # each turn it could not record, named


class _Written:
    def emit_turn(self, *_args: Any) -> dict[str, Any]:
        return {}


def test_a_sessions_history_goes_when_the_session_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server up for days sees a new session at every reconnection: what it keeps by session must go with it."""
    monkeypatch.setattr(server_run, "turn_attributes", lambda *_a: {})
    llm = SimpleNamespace(history_rounds=2)
    run = SimpleNamespace(questions=SimpleNamespace(questions=()), config=SimpleNamespace(llm=llm))
    turns = ServedTurns(run, _Written(), lambda _line: None, "en")  # type: ignore[arg-type]
    answered = TurnTimeline(start_ns=0, end_ns=1)
    for session in ("s1", "s2"):
        turns.finished(TurnRequest(session, "auto", "en01", 1), answered)
    assert set(turns.history) == {"s1", "s2"}
    turns.ended("s1")
    turns.ended("gone before it had any")
    assert set(turns.history) == {"s2"}


def test_first_of_returns_with_the_first_and_cancels_the_rest() -> None:
    async def go() -> tuple[bool, bool]:
        done = asyncio.Event()
        slow_cancelled = False

        async def slow() -> None:
            nonlocal slow_cancelled
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                slow_cancelled = True
                raise

        asyncio.get_running_loop().call_later(0.01, done.set)
        await first_of(slow(), done.wait())
        return done.is_set(), slow_cancelled

    assert asyncio.run(go()) == (True, True)
