"""Conditions interleaved turn by turn: each condition's run is its own process, started at once and kept
warm (models loaded), and told when to take each turn (``pipeline.run.gate``'s protocol), in the
order ``interleaved`` gives: A B, B A, A B ... So whatever slows the machine over the hour (the VM's
speed, a neighbour, a warming cache) falls on every condition alike instead of on the last to run
(METHOD M15). Only one condition's turn runs at a time; the others wait on their standard input.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from pipeline.endpoints.machine_load import PROC, tree_ticks
from pipeline.run.gate import DONE, GO, READY, interleaved


@dataclass
class ConditionProcess:
    """One condition's process and what it said: gate lines queued for the conductor, the rest passed on."""

    label: str
    proc: subprocess.Popen[str]
    out: TextIO
    gate: queue.Queue[str | None] = field(default_factory=queue.Queue)
    turns: int = 0
    taken: int = 0
    alive: bool = True
    own_ticks: int = 0  # CPU its process tree used while its own turns ran
    idle_ticks: int = 0  # ... and while the others' turns ran, when it should have been waiting
    others_turns: int = 0

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


def start(label: str, command: Sequence[str], cwd: Path, out: TextIO) -> ConditionProcess:
    proc = subprocess.Popen(list(command), cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    player = ConditionProcess(label, proc, out)
    threading.Thread(target=player.listen, name=f"conductor:{label}", daemon=True).start()
    return player


def conduct(
    commands: Mapping[str, Sequence[str]], cwd: Path, say: Callable[[str], None], out: TextIO = sys.stdout
) -> dict[str, int]:
    """Runs ``commands`` (label -> a ``pipeline.replay``-like command line whose run takes its turns when told:
    its plan's ``turn_gate``) interleaved; each one's exit status.

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
                if player.alive and pos < player.turns:
                    taken = _turn(player, players)
                    if not taken:
                        say(f"condition {label}: ended during turn {pos + 1} of {player.turns}")
        for player in players.values():
            say(cpu_line(player))
    finally:
        for player in players.values():
            if player.proc.stdin is not None and not player.proc.stdin.closed:
                player.proc.stdin.close()
    return {label: player.proc.wait() for label, player in players.items()}


TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def _ticks(players: Mapping[str, ConditionProcess]) -> dict[str, int]:
    """Each player's process tree's CPU ticks so far (one pass over /proc, between turns)."""
    by_pid = tree_ticks(PROC, {p.proc.pid: [p.proc.pid] for p in players.values()})
    return {label: by_pid[p.proc.pid] for label, p in players.items()}


def _turn(player: ConditionProcess, players: Mapping[str, ConditionProcess]) -> bool:
    """``player``'s next turn, and the CPU each process used meanwhile: its own, and the waiting others'."""
    before = _ticks(players)
    taken = player.go()
    after = _ticks(players)
    for label, other in players.items():
        used = after[label] - before[label]
        if other is player:
            other.own_ticks += used
        else:
            other.idle_ticks += used
            other.others_turns += 1
    return taken


def cpu_line(player: ConditionProcess) -> str:
    """What a condition's process used: in its own turns, and while it waited through the others'."""
    per = player.idle_ticks * TICK_MS / player.others_turns if player.others_turns else 0.0
    return (
        f"condition {player.label}: CPU {player.own_ticks * TICK_MS / 1000:.1f} s in its {player.taken} turn(s); "
        f"{player.idle_ticks * TICK_MS / 1000:.2f} s while waiting through {player.others_turns} of the others' "
        f"({per:.1f} ms per turn)"
    )


def described(labels: Sequence[str], turns: int = 4) -> str:
    """The interleaving in words, e.g. ``A B | B A | A B | B A ...``."""
    return " | ".join(" ".join(interleaved(pos, labels)) for pos in range(turns)) + " ..."
