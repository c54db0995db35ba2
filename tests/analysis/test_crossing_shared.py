"""The crossover record read with its capacity folders, and the report's M21 (3) boundary with its figures."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from labtools.script_module import load_script
from pipeline.analysis.crossing import CROSSES, ESTIMATED, MEASURED, SilenceAt, compare, curve_of, find_records
from pipeline.records import ramp_result as result
from pipeline.records.crossover import RECORD, Arm, Record, RecordError, write_record
from pipeline.report.build import build
from pipeline.report.load import load_paths
from pipeline.report.sections import centralised
from pipeline.report.sections.conclusion import CONCURRENCY_IN_WORDS
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
EXPERIMENT = ROOT / "tests" / "data" / "report" / "experiment"
CLOUD = "emulated cloud 'busy' (2 slots)"
OWN = "each device its own LLM"


def step(devices: int, p50: float | None, p90: float | None, verdict: str = "holds") -> result.Step:
    return result.Step(
        devices, f"r-{devices}d", "c", f"steps/{devices}", 10, {}, result.Quantiles(p50, p90), None, None, 60.0,
        None, None, 0, None, None, verdict, "",
    )  # fmt: skip


def capacity(*steps: result.Step, held: int | None = None) -> result.Capacity:
    return result.Capacity(
        "ws://x", "websocket", "f", {}, [s.devices for s in steps], 60, 300, 10, 50, 5, list(steps), held
    )


def measured_folder(root: Path, cloud_steps: tuple[result.Step, ...]) -> Path:
    result.write(root / "device", capacity(step(1, 3000.0, 4000.0)))
    result.write(root / "cloud", capacity(*cloud_steps, held=2))
    return write_record(root, Record(Arm("device", OWN), [Arm("cloud", CLOUD)]))


CLOUD_STEPS = (step(1, 1800.0, 2000.0), step(2, 1900.0, 2200.0), step(4, 2600.0, 3200.0), step(8, 5000.0, 7200.0))


def test_a_ramps_curve_leaves_out_void_steps_and_steps_without_a_silence() -> None:
    steps = (step(1, 1.0, 2.0), step(2, 3.0, 4.0, "void"), step(4, None, None, "too_few"), step(8, 5.0, 6.0, "fails"))
    assert curve_of(capacity(*steps), "c").points == (SilenceAt(1, 1.0, 2.0), SilenceAt(8, 5.0, 6.0))


def test_the_record_is_read_with_its_folders_and_the_crossings_computed(tmp_path: Path) -> None:
    found = compare(measured_folder(tmp_path, CLOUD_STEPS))
    assert found.device.points == (
        SilenceAt(1, 3000.0, 4000.0, MEASURED),
        SilenceAt(2, 3000.0, 4000.0, ESTIMATED),
        SilenceAt(4, 3000.0, 4000.0, ESTIMATED),
        SilenceAt(8, 3000.0, 4000.0, ESTIMATED),
    )
    [cloud] = found.shared
    assert cloud.what == CLOUD
    p50, p90 = cloud.crossings
    assert (p50.kind, p50.devices, p50.between) == (
        CROSSES,
        8 - 4 * 2000 / 2400,
        (4, 8),
    )  # 2600 at 4, 5000 at 8: 3000 is 1/6 of the way
    assert (p90.kind, p90.devices, p90.between) == (CROSSES, 8 - 4 * 3200 / 4000, (4, 8))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda root: (root / RECORD).write_text("{}"), r"crossover.json: not a crossover record"),
        (lambda root: (root / "cloud" / "capacity.json").unlink(), r"cloud/capacity.json: cannot be read"),
        (lambda root: result.write(root / "device", capacity(step(2, 1.0, 1.0))), r"device has no 1-device step"),
        (lambda root: write_record(root, Record(Arm("device", OWN), [])), r"names no shared LLM's ramp"),
    ],
)
def test_a_record_that_cannot_be_read_names_the_file_and_the_problem(
    tmp_path: Path, damage: object, message: str
) -> None:
    path = measured_folder(tmp_path, CLOUD_STEPS)
    damage(tmp_path)  # type: ignore[operator]
    with pytest.raises(RecordError, match=message):
        compare(path)


def test_records_are_found_above_a_ramps_step_traces_and_its_servers(tmp_path: Path) -> None:
    path = measured_folder(tmp_path, CLOUD_STEPS)
    files = [str(tmp_path / "cloud/steps/4/traces/r.jsonl"), str(tmp_path / "cloud/server/traces/s.jsonl")]
    assert find_records(files) == [path]
    assert find_records([str(tmp_path.parent / "other/traces/t.jsonl")]) == []


def test_without_a_record_the_concurrency_boundary_stays_in_words() -> None:
    found = centralised.read([str(EXPERIMENT / "traces" / "a1.jsonl")])
    assert (centralised.boundary(found), centralised.blocks(found)) == (None, [])


def test_the_report_gives_the_concurrency_boundary_its_figures_and_the_curves_beside_it(tmp_path: Path) -> None:
    folder = tmp_path / "experiment"
    shutil.copytree(EXPERIMENT, folder)
    steps = (*CLOUD_STEPS[:3], step(8, 3400.0, 3900.0))  # P50 crosses between 4 and 8, P90 never
    measured_folder(folder, steps)
    doc = build(load_paths([folder]), draw=False)
    text = doc.text()
    boundaries = text[text.index("Boundaries (M21)") :]
    assert CONCURRENCY_IN_WORDS not in boundaries
    assert (
        "Concurrency capacity is a trade-off between a centralised and a distributed architecture, not better or "
        "worse; measured on this machine (table below, silence = end of speech to first audible): "
        f"{CLOUD}: silence P90 2000 ms (measured) at 1 device(s), 3900 ms (measured) at 8, against 4000 ms "
        "(measured) with 1 device for a device with its own LLM; the same, estimated, for each of 8; no crossing "
        "within the measured range (up to 8 devices, measured)."
    ) in boundaries
    table = doc.table("centralised")
    assert table.headers == ("devices", "own LLM on each device", CLOUD)
    assert table.rows == (
        ("1", "3000 / 4000 (measured)", "1800 / 2000 (measured)"),
        ("2", "3000 / 4000 (estimated)", "1900 / 2200 (measured)"),
        ("4", "3000 / 4000 (estimated)", "2600 / 3200 (measured)"),
        ("8", "3000 / 4000 (estimated)", "3400 / 3900 (measured)"),
    )
    assert (
        f"{CLOUD}, P50: they cross at 6.0 devices (estimated: interpolated between the measured "
        "steps 4 and 8; the distributed figure at 8 devices is an estimate: the single-device figure)"
    ) in boundaries
    assert f"{CLOUD}, P90: no crossing within the measured range (up to 8 devices, measured)" in boundaries


def test_a_record_that_cannot_be_read_is_a_warning_and_the_boundary_stays_in_words(tmp_path: Path) -> None:
    folder = tmp_path / "experiment"
    shutil.copytree(EXPERIMENT, folder)
    (folder / RECORD).write_text("not json")
    text = build(load_paths([folder]), draw=False).text()
    assert CONCURRENCY_IN_WORDS in text
    assert f"{folder / RECORD}: not a crossover record" in text


def test_the_bench_prints_a_measured_folder_side_by_side_with_the_crossings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capacity_shared_bench = load_script("capacity_shared_bench")  # the script's own logic, loaded from its file
    measured_folder(tmp_path, CLOUD_STEPS)
    assert capacity_shared_bench.main(["--read", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    table = out[out.index(f"{'devices':>8}{'device':>18}{'shared 1':>18}") :]
    assert table[1:5] == [
        f"{1:>8}{'3000/4000':>18}{'1800/2000':>18}",
        f"{2:>8}{'3000*/4000*':>18}{'1900/2200':>18}",
        f"{4:>8}{'3000*/4000*':>18}{'2600/3200':>18}",
        f"{8:>8}{'3000*/4000*':>18}{'5000/7200':>18}",
    ]
    assert table[7] == (
        "  shared 1: P50: the shared LLM reaches a device's own LLM at 4.7 devices (estimated: interpolated between "
        "the measured steps 4 and 8; the distributed figure at 8 devices is an estimate: the single-device figure)."
    )
    assert capacity_shared_bench.main(["--read", str(tmp_path / "device")]) == 1
    assert "device/crossover.json: cannot be read" in capsys.readouterr().err


def test_a_report_of_ramps_only_gives_the_concurrency_boundary_under_its_own_heading(tmp_path: Path) -> None:
    from tests.report.sections.test_capacity import ramp

    ramp(tmp_path / "device", "device", "holds")
    ramp(tmp_path / "cloud", "cloud", "holds")
    write_record(tmp_path, Record(Arm("device", OWN), [Arm("cloud", CLOUD)]))
    doc = build(load_paths([tmp_path]), draw=False)
    text = doc.text()
    assert "How many devices this server holds" in text and centralised.TITLE in text
    assert (
        f"{CLOUD}: silence P90 1001 ms (measured) at 1 device(s), 1002 ms (measured) at 2, against 1001 ms "
        "(measured) with 1 device for a device with its own LLM; the same, estimated, for each of 2; the shared "
        "LLM is no quieter than a device's own from the first measured step (measured)."
    ) in text
    assert doc.table("centralised").rows == (
        ("1", "901 / 1001 (measured)", "901 / 1001 (measured)"),
        ("2", "901 / 1001 (estimated)", "902 / 1002 (measured)"),
    )
