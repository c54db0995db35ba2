"""The report's "How many devices this server holds" for capacity folders: the steps' table, the knee and the
curve, from capacity.json beside each step's traces; no M11 refusal for steps that differ by design."""

from __future__ import annotations

from pathlib import Path

from pipeline.capacity import step_verdict
from pipeline.capacity.profile import LoadProfile
from pipeline.capacity.ramp_plan import RampPlan
from pipeline.records.ramp_result import Capacity, Step, write
from pipeline.report.build import build
from pipeline.report.load import load_paths
from tests.capacity.test_users import step as fake_step

PLAN = RampPlan(steps=(1, 2), hold_s=10, max_hold_s=30, min_turns=1)


def ramp(folder: Path, label: str, second: str, cpu: float | None = None) -> None:
    """A two-step ramp of fake devices: its traces in steps/<N>/ and capacity.json over them; ``cpu``: the server's
    CPU at one device (% of a core), growing with the devices."""
    profile = LoadProfile(arrival="staggered", ramp_s=2, think_s=1)
    found = Capacity(label, "websocket", "fixtures", profile.as_dict(), [1, 2], 10, 30, 10, 50, 1, label=label)
    for n, kind in ((1, "holds"), (2, second)):
        run_id = f"{label}-{n}d"
        _w, rows, _t = fake_step(folder / "steps" / str(n), profile, devices=n, run_id=run_id)
        fig = step_verdict.figures(rows)
        found.steps.append(
            Step(
                n,
                run_id,
                f"cid-{n}",
                f"steps/{n}",
                fig.turns,
                fig.failures,
                fig.silence_ms.__class__(p50=900.0 + n, p90=1000.0 + n, p99=1100.0 + n),
                None,
                None,
                13.0,
                None,
                None,
                0,
                None if cpu is None else cpu * n,
                None,
                kind,
                f"{kind} because",
            )
        )
    found.knee, found.none_failed = step_verdict.knee(found.steps)
    found.devices_held = found.knee
    found.stopped = "test"
    write(folder, found)


def test_capacity_folders_are_the_reading_with_their_table_and_curve(tmp_path: Path) -> None:
    ramp(tmp_path / "lab", "lab", "fails")
    ramp(tmp_path / "real", "real", "holds", cpu=40.0)
    data = load_paths([tmp_path / "lab", tmp_path / "real"])
    doc = build(data, draw=True)
    text = doc.text()
    assert "How many devices this server holds" in text and "COMPARISON REFUSED" not in text
    assert doc.comparable
    assert "lab (websocket, realtime listening): holds 1 device(s)" in text
    assert "real (websocket, realtime listening): held 2 device(s) or more" in text
    lab = doc.table("capacity")
    assert [r[:3] for r in lab.rows] == [("1", "holds", "1"), ("2", "fails", "3")]
    assert lab.rows[0][4] == "1001" and lab.rows[0][8] == "not measured (no --server-pid)"
    assert doc.table("capacity-2").rows[1][1] == "holds"
    assert [f.key for f in doc.figures()] == ["capacity"] and doc.figures()[0].png.startswith(b"\x89PNG")
    # devices held per core the server kept busy there: 2 devices at 80 % of a core; none without its CPU
    per_core = doc.table("capacity-per-core")
    assert [r[0] for r in per_core.rows] == ["lab", "real"]
    assert per_core.rows[0][2:] == ("1", "not measured", "not measured")
    assert per_core.rows[1][2:] == ("2+", "80 %", "2.5")
    # the condition sections are left out: they would pool steps of different device counts
    assert not any(h.startswith("1.") for h in text.splitlines())
