"""The turn gate: a run that waits to be told before each turn, so that several conditions' runs can take
turns one at a time, interleaved (METHOD M15: one variable at a time; whatever drifts over the hour
falls on every condition alike).

A run's turns go through ``before(pos)`` and ``after(pos)`` (pos: the turn's place in the device's plan,
from 0). The default gate is always open. ``StdioGate`` is a run in its own process, conducted by
another (``pipeline.run.interleave``): once its models are loaded it prints ``gate: ready N`` (N: its
turns), then before each turn reads ``go`` from standard input and after it prints ``gate: done POS``.
``Baton`` is the same in one process, several runs on one event loop (the virtual clock's tests).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from typing import Protocol, TextIO

READY, GO, DONE = "gate: ready", "go", "gate: done"


class TurnGate(Protocol):
    """What a run asks before each turn and tells after it."""

    async def before(self, pos: int) -> None: ...

    def after(self, pos: int) -> None: ...


class Open:
    """No gate: every turn starts as soon as the one before it ends."""

    async def before(self, pos: int) -> None:
        return None

    def after(self, pos: int) -> None:
        return None


OPEN = Open()


class GateClosed(RuntimeError):
    """The conductor went away (standard input ended) before telling the run to go on."""


class StdioGate:
    """The run's side of ``pipeline.run.interleave``'s protocol, over its standard input and output."""

    def __init__(self, turns: int, read: Callable[[], str] | None = None, out: TextIO | None = None) -> None:
        self.turns = turns
        self._read = read or sys.stdin.readline
        self._out = out or sys.stdout

    def _say(self, line: str) -> None:
        self._out.write(line + "\n")
        self._out.flush()

    async def before(self, pos: int) -> None:
        if pos == 0:
            self._say(f"{READY} {self.turns}")
        # a blocking read, off the loop: nothing else of this run happens between turns
        line = await asyncio.get_running_loop().run_in_executor(None, self._read)
        if not line:
            raise GateClosed(f"--turn-gate: standard input ended before turn {pos + 1} of {self.turns}")
        if line.strip() != GO:
            raise GateClosed(f"--turn-gate: before turn {pos + 1} the conductor said {line.strip()!r}, not {GO!r}")

    def after(self, pos: int) -> None:
        self._say(f"{DONE} {pos}")


def interleaved(pos: int, labels: Sequence[str]) -> list[str]:
    """The order the conditions take turn ``pos`` in: forward on even turns, backward on odd (A B B A
    A B ..., with three: A B B' B' B A ...), so a drift that is linear over any two turns lands on every
    condition equally."""
    return list(labels) if pos % 2 == 0 else list(reversed(labels))


class Baton:
    """Several runs in one process taking their turns in ``interleaved`` order: ``gate(label)`` is each
    run's gate; every run must have the same number of turns."""

    def __init__(self, labels: Sequence[str]) -> None:
        self.labels = list(labels)
        self._pos = 0
        self._queue = interleaved(0, self.labels)  # who takes the current turn, next first
        self._turn = {label: asyncio.Event() for label in self.labels}

    def gate(self, label: str) -> TurnGate:
        return _BatonGate(self, label)

    async def wait(self, label: str) -> None:
        while self._queue[0] != label:
            self._turn[label].clear()
            await self._turn[label].wait()

    def done(self) -> None:
        self._queue.pop(0)
        if not self._queue:
            self._pos += 1
            self._queue = interleaved(self._pos, self.labels)
        self._turn[self._queue[0]].set()


class _BatonGate:
    """One run's gate of a ``Baton``."""

    def __init__(self, baton: Baton, label: str) -> None:
        self.baton, self.label = baton, label

    async def before(self, pos: int) -> None:
        await self.baton.wait(self.label)

    def after(self, pos: int) -> None:
        self.baton.done()
