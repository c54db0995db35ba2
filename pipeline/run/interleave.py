"""Conditions interleaved turn by turn: each condition's run is its own process, started at once and kept
warm (models loaded), and told when to take each turn (``pipeline.run.gate``'s protocol), in the
order ``interleaved`` gives: A B, B A, A B ... So whatever slows the machine over the hour (the VM's
speed, a neighbour, a warming cache) falls on every condition alike instead of on the last to run
(METHOD M15). Only one condition's turn runs at a time; the others wait on their standard input.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from pipeline.run.gate import DONE, GO, READY, interleaved

GATE_FLAG = "--turn-gate"


@dataclass
class Player:
    """One condition's process and what it said: gate lines queued for the conductor, the rest passed on."""

    label: str
    proc: subprocess.Popen[str]
    out: TextIO
    gate: queue.Queue[str | None] = field(default_factory=queue.Queue)
    turns: int = 0
    taken: int = 0
    alive: bool = True

    def listen(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("gate:"):
                self.gate.put(line.strip())
            else:
                self.out.write(line)
                self.out.flush()
        self.gate.put(None)  # its output ended: it exited, or is about to

    def expect(self, prefix: str) -> str | None:
        """Its next gate line, which must start with ``prefix``; None (and no longer alive) when it ended."""
        line = self.gate.get()
        if line is None or not line.startswith(prefix):
            self.alive = False
            return None
        return line

    def go(self) -> bool:
        """Tells it to take its next turn and waits until it has; False when it went away instead."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(GO + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.alive = False
            return False
        if self.expect(DONE) is None:
            return False
        self.taken += 1
        if self.taken == self.turns:
            self.proc.stdin.close()  # its last turn: nothing more will be asked of it
        return True


def start(label: str, command: Sequence[str], cwd: Path, out: TextIO) -> Player:
    proc = subprocess.Popen(
        [*command, GATE_FLAG], cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
    )
    player = Player(label, proc, out)
    threading.Thread(target=player.listen, name=f"conductor:{label}", daemon=True).start()
    return player


def conduct(
    commands: Mapping[str, Sequence[str]], cwd: Path, say: Callable[[str], None], out: TextIO = sys.stdout
) -> dict[str, int]:
    """Runs ``commands`` (label -> a ``pipeline.replay``-like command line) interleaved; each one's exit status.

    A condition that fails to start or dies mid-way is left out of the turns that follow (its status
    says so); the others go on."""
    players = {label: start(label, command, cwd, out) for label, command in commands.items()}
    try:
        for player in players.values():  # all loaded before the first turn: no turn runs beside a model loading
            ready = player.expect(READY)
            player.turns = int(ready.split()[-1]) if ready else 0
            if ready is None:
                say(f"condition {player.label}: ended before its first turn")
        most = max((p.turns for p in players.values()), default=0)
        labels = list(players)
        for pos in range(most):
            for label in interleaved(pos, labels):
                player = players[label]
                if player.alive and pos < player.turns and not player.go():
                    say(f"condition {label}: ended during turn {pos + 1} of {player.turns}")
    finally:
        for player in players.values():
            if player.proc.stdin is not None and not player.proc.stdin.closed:
                player.proc.stdin.close()
    return {label: player.proc.wait() for label, player in players.items()}


def described(labels: Sequence[str], turns: int = 4) -> str:
    """The interleaving in words, e.g. ``A B | B A | A B | B A ...``."""
    return " | ".join(" ".join(interleaved(pos, labels)) for pos in range(turns)) + " ..."
