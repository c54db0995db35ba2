"""The fault matrix's cases as data: what breaks, when, for how long, and the run it breaks.

Every case is one ``pipeline.serve`` and one device emulator (``pipeline.replay --server``) on the simulator's
stages, with a fault put in once the device's first row is written (the next question is then being asked:
``mid_turn_s`` later it is mid-turn). ``limit`` questions x ``rounds`` x ``devices`` are planned; each must end
in exactly one row. ``limit_s`` bounds the device's whole run (past it the device is stopped, and says so): a
device whose server is gone for good retries it on the firmware's backoff for minutes a question, so the cases
that leave it so ask fewer questions and wait longer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Fault = Literal["kill", "kill-restart", "kill-worker", "cut", "loss", "llm", "speech", "disk"]
Transport = Literal["websocket", "mqtt"]


@dataclass(frozen=True, slots=True)
class FaultCase:
    """One row of the matrix. ``duration_s``: how long a cut or an endpoint's failure lasts, or how long after a
    kill the server is started again; ``mode``: what a failing endpoint does (the fault proxy's mode)."""

    name: str
    title: str
    fault: Fault
    limit: int = 4
    rounds: int = 1
    devices: int = 1
    processes: int = 1
    transport: Transport = "websocket"
    link_profile: str = ""
    duration_s: float = 0.0
    mode: str = ""
    mid_turn_s: float = 1.5
    turn_timeout_s: float = 0.0  # the server's [run] turn_timeout_s (0: the simulator's)
    disk_kib: int = 0  # the server's trace folder on a tmpfs of this size
    limit_s: float = 240.0
    server: str = "lab"  # or "real": the xiaozhi-esp32-server of ``real_folder`` under ``real_python`` (fault_real)
    real_folder: str = ""
    real_python: str = ""
    real_gateway: str = ""  # a checkout of the real MQTT gateway: the MQTT + UDP cases go through it

    @property
    def namespace(self) -> bool:
        """Run in a network and mount namespace of its own: a cut (nftables) and a small disk (a tmpfs mount)
        need root and must not touch the machine's own network or mounts."""
        return self.fault in ("cut", "disk")

    @property
    def planned_turns(self) -> int:
        return self.limit * self.rounds * self.devices


CASES: dict[str, FaultCase] = {
    c.name: c
    for c in (
        FaultCase("kill", "server kill -9 mid-turn, not restarted", "kill", limit=3, limit_s=420),
        FaultCase("kill-restart", "server kill -9 mid-turn, restarted on its port 3 s later", "kill-restart",
                  duration_s=3.0),
        FaultCase("kill-worker", "one of 2 server processes kill -9 mid-turn (--processes 2)", "kill-worker",
                  devices=4, processes=2),
        FaultCase("cut-5", "network cut 5 s (nftables drops the server port's TCP)", "cut", duration_s=5.0),
        FaultCase("cut-60", "network cut 60 s (nftables drops the server port's TCP)", "cut", duration_s=60.0,
                  limit_s=420),
        FaultCase("udp-loss-5", "MQTT + UDP, 5 % loss and reordering (link profile lossy-5)", "loss",
                  transport="mqtt", link_profile="lossy-5"),
        FaultCase("udp-loss-20", "MQTT + UDP, 20 % loss and reordering (link profile lossy-20)", "loss",
                  transport="mqtt", link_profile="lossy-20"),
        FaultCase("llm-503", "LLM endpoint answers 503 for 5 s", "llm", mode="503", duration_s=5.0),
        FaultCase("llm-reset", "LLM endpoint resets the connection for 5 s", "llm", mode="reset", duration_s=5.0),
        FaultCase("llm-stall", "LLM endpoint stalls past the turn timeout (8 s)", "llm", mode="stall",
                  duration_s=3.0, turn_timeout_s=8.0),
        FaultCase("speech-stall", "speech services (ASR) stall past the turn timeout (8 s)", "speech",
                  mode="stall", duration_s=3.0, turn_timeout_s=8.0),
        FaultCase("disk-full", "server's trace folder on a full disk (a 24 KiB tmpfs)", "disk", limit=3, disk_kib=24,
                  limit_s=420),
    )
}  # fmt: skip


def against_real(case: FaultCase, folder: Path, python: Path, gateway: Path | None = None) -> FaultCase:
    """``case`` against the real server whose ``app.py`` is in ``folder``, run by ``python`` (its venv's), with
    the real MQTT gateway of ``gateway`` in front of it for the MQTT + UDP cases."""
    return dataclasses.replace(
        case, server="real", real_folder=str(folder), real_python=str(python), real_gateway=str(gateway or "")
    )


def pick(names: str) -> list[FaultCase]:
    """The cases named (comma-separated; "" or "all": every one), or a ValueError naming the unknown ones."""
    wanted = [n.strip() for n in names.split(",") if n.strip() and n.strip() != "all"]
    unknown = [n for n in wanted if n not in CASES]
    if unknown:
        raise ValueError(f"unknown fault case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    return [CASES[n] for n in wanted] if wanted else list(CASES.values())
