"""Turns mode of ``scripts/interop/xiaozhi_server.py`` (``--vad-waits``): which servers run, at which VAD wait.

Issue 41, part 5: the real xiaozhi-esp32-server at its shipped end-pointing (``VAD.SileroVAD.min_silence_duration_ms``
in the checkout's ``config.yaml``) and at longer waits, each a replay run of its own, beside the lab's server
with the same rule (``[vad] profile = "xiaozhi-server"``, ``[vad.xiaozhi_server] silence_ms``) at the shipped
wait and at any other ``--lab-vad-waits`` names. Each run's turns are then scored against the fixtures' truth
(``pipeline/report/cutoffs_by_run.py``): how many users a wait cuts off, and what waiting longer costs them.
Without ``--vad-waits`` the runs are the script's usual two: each server with its own setting.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol

REAL, LAB = "real server", "lab server"
# turns mode's devices ask each question of a quiet server (``pipeline.replay --settle-ms``): a server that cut a
# question in two answers its second half after the device's turn has ended, into the next question otherwise
SETTLE_MS = 2000
VAD_KEYS = ("VAD", "SileroVAD", "min_silence_duration_ms")  # the real server's wait, in its config.yaml


@dataclass(frozen=True, slots=True)
class ServerRun:
    """One server to start and ask the questions: which, and the VAD wait written into its config."""

    server: str  # REAL or LAB
    wait_ms: int | None = None  # None: the server's own setting (outside turns mode)
    shipped: bool = False  # the wait is the one the real server's checkout ships

    @property
    def tag(self) -> str:
        """What the run's folders and process names carry after the condition ("" outside turns mode, so the
        usual run's names stay as they were)."""
        return "" if self.wait_ms is None else f"-vad{self.wait_ms}"

    def label(self, condition: str) -> str:
        """The run's label; its folder is made from it, so it holds no brackets."""
        if self.wait_ms is None:
            return f"{self.server}, {condition}"
        return f"{self.server}, VAD {self.wait_ms} ms{' shipped' if self.shipped else ''}, {condition}"


class MadeRun(Protocol):
    """A run the script made: its label, condition and the emulator's run folder."""

    @property
    def label(self) -> str: ...
    @property
    def condition(self) -> str: ...
    @property
    def folder(self) -> Path: ...


@dataclass(frozen=True, slots=True)
class TurnsOptions:
    """The script's options that turns mode reads (its command line, parsed by the script)."""

    vad_waits: str | None  # "200,500,800" as given; None: not turns mode
    lab_vad_waits: str | None
    capacity: bool  # capacity mode asked for
    gateway: bool  # a gateway checkout given
    lab: bool  # the lab's server asked too (no --no-lab)
    fixtures: Path
    limit: int
    rounds: int

    @property
    def waits(self) -> tuple[int, ...]:
        return waits(self.vad_waits) if self.vad_waits else ()

    @property
    def lab_waits(self) -> tuple[int, ...]:
        return waits(self.lab_vad_waits) if self.lab_vad_waits else ()


class TurnsRun(NamedTuple):
    """A finished run as the turns table scores it (``cutoffs_by_run.score_run``'s arguments)."""

    label: str
    condition: str
    device: Path  # the emulator's run folder
    server: Path | None  # the lab server's traces, read beside the device's to score its declared end
    against: str | None  # the label of the run a longer wait is compared with (the real server's first wait)


def waits(text: str) -> tuple[int, ...]:
    """``200,500,800`` -> the waits in ms, in the order given (the first is the reference)."""
    try:
        found = tuple(int(w) for w in text.split(",") if w.strip())
    except ValueError:
        raise ValueError(f"{text!r}: waits in ms, comma-separated (200,500,800)") from None
    if not found or any(w <= 0 for w in found) or len(set(found)) != len(found):
        raise ValueError(f"{text!r}: one or more distinct positive waits in ms")
    return found


def turns_problem(o: TurnsOptions) -> str:
    """Why the turns mode's options cannot be used as given; "" when they can."""
    try:
        vad_waits, lab_waits = o.waits, o.lab_waits
    except ValueError as exc:
        return f"--vad-waits / --lab-vad-waits: {exc}"
    if not vad_waits:
        return "--lab-vad-waits needs --vad-waits" if lab_waits else ""
    if o.capacity or o.gateway:
        return "--vad-waits asks each server over WebSocket, one question at a time: not with --capacity or --gateway"
    extra = sorted(set(lab_waits) - set(vad_waits))
    return f"--lab-vad-waits: {', '.join(map(str, extra))} not in --vad-waits" if extra else ""


def shipped_wait(server_folder: Path) -> int | None:
    """The checkout's ``VAD.SileroVAD.min_silence_duration_ms`` (its ``config.yaml``), None where it sets none.

    Read by indentation, not by a YAML parser: the lab depends on none, and the three keys are plain block
    mappings in the server's config."""
    path: list[tuple[int, str]] = []
    for line in (server_folder / "config.yaml").read_text(encoding="utf-8").splitlines():
        found = re.match(r"( *)([A-Za-z_][\w-]*)\s*:(.*)$", line)
        if found is None:
            continue  # a comment, a list item, a blank line, a block scalar's text
        indent = len(found[1])
        while path and path[-1][0] >= indent:
            path.pop()
        path.append((indent, found[2]))
        if tuple(key for _, key in path) == VAD_KEYS:
            value = found[3].split("#", 1)[0].strip().strip("'\"")
            return int(value) if value.isdigit() else None
    return None


def server_runs(
    vad_waits: Sequence[int] | None, lab_waits: Sequence[int] | None, shipped: int | None, lab: bool
) -> list[ServerRun]:
    """The runs in order: without waits each server once with its own setting; with them, per wait the real
    server and (where ``lab_waits`` names the wait, by default the first) the lab's. The first wait is marked
    shipped only where it is the checkout's value."""
    if not vad_waits:
        return [ServerRun(REAL), *([ServerRun(LAB)] if lab else [])]
    lab_at = set(lab_waits or vad_waits[:1]) if lab else set()
    runs = []
    for wait in vad_waits:
        marked = wait == vad_waits[0] == shipped
        runs += [ServerRun(REAL, wait, marked), *([ServerRun(LAB, wait, marked)] if wait in lab_at else [])]
    return runs


def planned(o: TurnsOptions, server_folder: Path) -> list[ServerRun]:
    """The script's runs for its options and the checkout (the shipped wait read from it in turns mode)."""
    shipped = shipped_wait(server_folder) if o.waits else None
    return server_runs(o.waits, o.lab_waits or None, shipped, o.lab)


def settle(o: TurnsOptions) -> list[str]:
    """The replay's options that wait for a quiet server before each question, in turns mode only."""
    return ["--settle-ms", str(SETTLE_MS)] if o.waits else []


def lab_traces(out: Path, condition: str, run: ServerRun) -> Path:
    """Where the lab server of ``run`` writes its traces (its ``--out``, one folder a run)."""
    return out / "serve" / f"{condition}{run.tag}" / "traces"


def turns_runs(plan: Sequence[ServerRun], finished: Sequence[MadeRun], out: Path) -> list[TurnsRun]:
    """The finished runs to score, each with its lab server's traces and the run it is compared with (a longer
    wait of the real server with its first)."""
    first = next((s for s in plan if s.server == REAL), None)
    scored = []
    for done in finished:
        run = next((s for s in plan if s.label(done.condition) == done.label), None)
        traces = lab_traces(out, done.condition, run) if run is not None and run.server == LAB else None
        longer = first is not None and run is not None and run.server == REAL and run != first
        against = first.label(done.condition) if first is not None and longer else None
        scored.append(TurnsRun(done.label, done.condition, done.folder, traces, against))
    return scored


def turns_intro(o: TurnsOptions, server_folder: Path) -> str:
    """The heading and first paragraph of ``turns.md``."""
    fixtures, limit, rounds, shipped = o.fixtures, o.limit, o.rounds, shipped_wait(server_folder)
    ships = f"{shipped} ms" if shipped is not None else "no value (the server's own default applies)"
    return (
        "# What the silence costs: the real server's VAD wait beside the lab's server\n\n"
        f"Fixtures {fixtures.name}, the first {limit} question(s), {rounds} round(s) (the first a warm-up, left out); "
        f"the checkout's config.yaml ships VAD.SileroVAD.min_silence_duration_ms = {ships}. Each run is one server "
        "at one wait, asked by the device emulator over WebSocket on loopback. Only measured turns whose question "
        "carries a truth (truth.csv) count. `cut off`: the end of the user's turn was declared inside a pause, "
        "with its 95 % Wilson interval; `seen by`: `declared` where the server's own VAD span gave the end-point "
        "(the lab's server, its traces read beside the device's), `stt` where the device inferred it from the "
        "server's `stt` messages (the real server writes no spans): a device alone cannot score a turn in which "
        "the server sent no `stt`, so the runs' counts of turns with a truth may differ. Silences in ms over the "
        "successful turns: from the user's true end of speech, and from the end the device's own VAD found (the "
        "report's silence), each to the answer's first audible sample. `frontier`: no other run of the condition cuts "
        "off fewer users and keeps them waiting less.\n\n"
    )
