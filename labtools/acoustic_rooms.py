"""The simulated rooms ``scripts/bench_acoustic.py`` measures the sound in (issue 43's conditions), and each one's goal.

Here rather than in the script, which was long enough without them, so the script reads as the bench's steps.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.acoustic.room import Noise


@dataclass(frozen=True, slots=True)
class Room:
    """One room condition of the sweep."""

    rt60: float
    snr_db: float
    distance_m: float
    noise: Noise = "white"
    rate: int = 16000
    soft: bool = False

    @property
    def goal_ms(self) -> float:
        """The issue's goal: 20 ms up to RT60 0.6 s at SNR 20 dB or more and 1.5 m, 50 ms anywhere else swept."""
        return 20.0 if self.rt60 <= 0.6 and self.snr_db >= 20 and self.distance_m <= 1.5 else 50.0

    @property
    def label(self) -> str:
        extra = [
            x
            for x in (
                self.noise if self.noise != "white" else "",
                f"{self.rate // 1000} kHz" if self.rate != 16000 else "",
                "soft" if self.soft else "",
            )
            if x
        ]
        return f"RT60 {self.rt60:.1f} s, SNR {self.snr_db:g} dB, {self.distance_m:g} m" + "".join(
            f", {x}" for x in extra
        )


def sweep(quick: bool) -> list[Room]:
    """The issue's conditions: the grid, then pink noise, soft onsets and other rates at its hard corners."""
    grid = [Room(rt, snr, d) for rt in (0.2, 0.4, 0.6, 0.8) for snr in (30.0, 20.0, 10.0) for d in (1.5, 3.0)]
    corners = [Room(0.6, 20.0, 1.5), Room(0.8, 10.0, 3.0)]
    if quick:
        grid = corners
    variants = [Room(r.rt60, r.snr_db, r.distance_m, noise="pink") for r in (Room(0.2, 20.0, 1.5), *corners)]
    variants += [Room(r.rt60, r.snr_db, r.distance_m, soft=True) for r in (Room(0.3, 20.0, 1.5), *corners)]
    variants += [Room(r.rt60, r.snr_db, r.distance_m, rate=rate) for rate in (8000, 48000) for r in corners]
    return grid + variants
