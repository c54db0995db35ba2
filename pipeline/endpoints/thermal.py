"""Reads the device temperature, or says there is none (METHOD M9, M20: never invent it)."""

from __future__ import annotations

from pathlib import Path

THERMAL_ROOT = Path("/sys/class/thermal")


def read_temp_c(root: Path = THERMAL_ROOT) -> float | None:
    """The hottest thermal zone in degrees Celsius, or None where no zone can be read."""
    temps = []
    for zone in sorted(root.glob("thermal_zone*/temp")):
        try:
            temps.append(int(zone.read_text().strip()) / 1000)
        except (OSError, ValueError):
            continue
    return max(temps) if temps else None
