"""Temperature (M9, M20): sysfs sensors on fake trees, a user's command that works, fails, hangs or prints
garbage (reported once, column empty, never invented), each turn's reading from the samples, and the
replay's ``--temp-command``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from pipeline.clock import RealClock, VirtualClock, run_on_clock
from pipeline.endpoints.thermal import ThermalError, parse_celsius, read_sysfs_c, run_temp_command
from pipeline.endpoints.thermometer import Sample, Thermometer
from pipeline.records.bench_csv import read_bench_csv
from pipeline.replay import main, overrides, parse_args
from pipeline.settings.config import ProbeConfig, load_config
from tests.fixture_files import make_fixtures
from tests.paths import REPO_ROOT
from tests.scenario import StepClock

ROOT = REPO_ROOT
T = TypeVar("T")


def real(coro: Awaitable[T]) -> T:
    async def wrapped() -> T:
        return await coro

    return run_on_clock(wrapped(), RealClock())


def sysfs(root: Path, files: dict[str, str]) -> tuple[Path, Path]:
    """A fake /sys/class: ``files`` maps paths under it to their text; returns (thermal root, hwmon root)."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root / "thermal", root / "hwmon"


def thermometer_of(clock: StepClock, said: list[str], **kwargs: float) -> tuple[Thermometer, Callable[..., None]]:
    """A thermometer whose next reading the test sets: a number, None (no sensor) or a ThermalError."""
    queued: list[float | ThermalError | None] = []

    async def read() -> float | None:
        value = queued.pop(0)
        if isinstance(value, ThermalError):
            raise value
        return value

    def then(*values: float | ThermalError | None) -> None:
        queued.extend(values)

    return Thermometer(read, clock, interval_s=kwargs.get("interval_s", 1.0), source="test", say=said.append), then


def take(thermometer: Thermometer, clock: StepClock, at_ns: int) -> None:
    clock.t = at_ns
    asyncio.run(thermometer.sample())


# sysfs


def test_the_hottest_plausible_sensor_of_thermal_zones_and_hwmon(tmp_path: Path) -> None:
    thermal, hwmon = sysfs(
        tmp_path,
        {
            "thermal/thermal_zone0/temp": "45000\n",
            "thermal/thermal_zone1/temp": "garbage\n",  # unreadable: skipped
            "thermal/cooling_device0/cur_state": "3\n",  # not a temperature
            "hwmon/hwmon0/temp1_input": "51250\n",
            "hwmon/hwmon0/temp2_input": "-128000\n",  # a disconnected probe: not a temperature
            "hwmon/hwmon1/temp1_input": "255000\n",
            "hwmon/hwmon1/temp1_max": "99000\n",  # a limit, not a reading
        },
    )
    assert read_sysfs_c(thermal, hwmon) == 51.25


def test_thermal_zones_alone_and_hwmon_alone(tmp_path: Path) -> None:
    thermal, hwmon = sysfs(tmp_path, {"thermal/thermal_zone3/temp": "38500"})
    assert read_sysfs_c(thermal, hwmon) == 38.5
    thermal, hwmon = sysfs(tmp_path / "b", {"hwmon/hwmon2/temp3_input": "62000"})
    assert read_sysfs_c(thermal, hwmon) == 62.0


def test_no_sensor_no_reading_and_a_thermometer_with_no_source(tmp_path: Path) -> None:
    thermal, hwmon = tmp_path / "thermal", tmp_path / "hwmon"
    assert read_sysfs_c(thermal, hwmon) is None
    said: list[str] = []
    t = Thermometer.for_run(ProbeConfig(), RealClock(), said.append, thermal_root=thermal, hwmon_root=hwmon)
    assert t.source.startswith("none (no sensor under")

    async def briefly() -> None:
        async with t:
            await asyncio.sleep(0.01)

    real(briefly())
    assert t.samples == () and t.reading(0, 2**62) is None and t.problems == () and said == []


def test_sysfs_is_sampled_in_the_background_on_the_real_clock(tmp_path: Path) -> None:
    thermal, hwmon = sysfs(tmp_path, {"thermal/thermal_zone0/temp": "47000"})
    clock = RealClock()
    t = Thermometer.for_run(ProbeConfig(temp_interval_ms=20), clock, thermal_root=thermal, hwmon_root=hwmon)

    async def turn() -> tuple[int, int]:
        async with t:
            start = clock.now_ns()
            await asyncio.sleep(0.2)
            return start, clock.now_ns()

    start, end = real(turn())
    assert len(t.samples) >= 2 and {s.celsius for s in t.samples} == {47.0}
    assert t.reading(start, end) == 47.0


def test_the_virtual_clock_samples_nothing(tmp_path: Path) -> None:
    thermal, _ = sysfs(tmp_path, {"thermal/thermal_zone0/temp": "47000"})
    t = Thermometer.for_run(ProbeConfig(temp_command="echo 47.5"), VirtualClock(), thermal_root=thermal)

    async def turn() -> None:
        async with t:
            await asyncio.sleep(5)

    run_on_clock(turn(), VirtualClock())
    assert t.source.startswith("none (the virtual clock") and t.samples == () and t.reading(0, 2**62) is None


# a user's command


def test_a_command_printing_a_temperature() -> None:
    assert real(run_temp_command("echo 47.5")) == 47.5
    assert real(run_temp_command("printf '  -3\\n'")) == -3.0
    t = Thermometer.for_run(ProbeConfig(temp_command="echo 47.5"), RealClock())
    assert t.source == "command 'echo 47.5'"
    taken = real(t.sample())
    assert taken is not None and taken.celsius == 47.5 and t.problems == ()


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("false", "temperature command 'false' failed (exit 1)"),
        ("echo no sensor >&2; exit 3", "temperature command 'echo no sensor >&2; exit 3' failed (exit 3): 'no sensor'"),
        ("no-such-thermometer", "failed (exit 127: command not found): "),
        ("echo hot", "temperature command 'echo hot' printed 'hot', not a number: it should print degrees Celsius"),
        ("echo 47.5 C", "printed '47.5 C', not a number"),
        ("printf '47\\n48\\n'", "printed '47\\n48', not a number"),
        ("true", "temperature command 'true' printed nothing: it should print one number, e.g. 47.5"),
        ("echo nan", "printed 'nan': not a temperature between -40 and 150 °C"),
        ("echo 47500", "printed '47500': not a temperature between -40 and 150 °C (sysfs gives millidegrees"),
        ("echo -273.15", "printed '-273.15': not a temperature between -40 and 150 °C"),
        ("yes | head -c 500", "…', not a number"),
    ],
)
def test_a_failing_or_garbage_printing_command_says_what_and_what_was_expected(command: str, message: str) -> None:
    with pytest.raises(ThermalError) as caught:
        real(run_temp_command(command))
    assert message in str(caught.value)
    assert len(str(caught.value)) < 250  # garbage is quoted in part, not poured out


def test_a_hanging_command_is_stopped_with_everything_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    command = f"sleep 30 & echo $! > {pid_file}; wait; echo 40"
    began = time.monotonic()
    with pytest.raises(ThermalError, match=r"gave no answer within 0\.3 s: stopped it"):
        real(run_temp_command(command, timeout_s=0.3))
    assert time.monotonic() - began < 5
    assert not _running(int(pid_file.read_text()))


def test_stopping_the_run_stops_a_command_in_flight_without_a_problem(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    probe = ProbeConfig(temp_command=f"sleep 30 & echo $! > {pid_file}; wait; echo 40")
    t = Thermometer.for_run(probe, RealClock(), timeout_s=20)

    async def short_run() -> None:
        async with t:
            while not (pid_file.exists() and pid_file.read_text().endswith("\n")):  # the sleep has started
                await asyncio.sleep(0.01)

    began = time.monotonic()
    real(short_run())
    assert time.monotonic() - began < 5 and t.problems == () and t.samples == ()
    assert not _running(int(pid_file.read_text()))


def _running(pid: int) -> bool:
    """Still alive 2 s on: a SIGKILL takes effect when the process next runs, not at once."""
    deadline = time.monotonic() + 2
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return _alive(pid)


def _alive(pid: int) -> bool:
    """Alive and not a zombie (in a container nobody may reap the killed sleep)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_a_hanging_command_never_blocks_the_event_loop() -> None:
    t = Thermometer.for_run(ProbeConfig(temp_command="sleep 30; echo 40"), RealClock(), timeout_s=20)

    async def ticks() -> int:
        count = 0
        async with t:
            for _ in range(20):
                await asyncio.sleep(0.01)
                count += 1
        return count

    began = time.monotonic()
    assert real(ticks()) == 20
    assert time.monotonic() - began < 5  # 20 ticks of 10 ms, neither waiting on the command nor its 20 s limit


def test_a_failing_command_is_reported_once_over_many_samples_and_the_run_goes_on(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    said: list[str] = []
    probe = ProbeConfig(temp_command=f"echo x >> {runs}; echo hot", temp_interval_ms=10)
    clock = RealClock()
    t = Thermometer.for_run(probe, clock, said.append)

    async def turns() -> list[float | None]:
        readings = []
        async with t:
            async with asyncio.timeout(10):
                while not t.problems:  # the first sample fails
                    await asyncio.sleep(0.01)
            for _ in range(5):
                start = clock.now_ns()
                await asyncio.sleep(0.05)
                readings.append(t.reading(start, clock.now_ns()))
        return readings

    assert real(turns()) == [None] * 5
    assert said == [
        f"temperature command 'echo x >> {runs}; echo hot' printed 'hot', not a number: it should print degrees "
        "Celsius alone, e.g. 47.5; temp_c stays empty for the rest of the run (never invented)"
    ]
    assert t.problems == tuple(said) and t.samples == ()
    assert runs.read_text() == "x\n"  # a source that printed garbage is not asked again


# each turn's reading


def test_a_turn_reads_the_hottest_sample_taken_during_it() -> None:
    clock = StepClock(step_ns=0, t=0)  # still between the samples the test takes
    said: list[str] = []
    t, then = thermometer_of(clock, said)
    then(40.0, 44.5, 42.0, None)
    for at in (100, 200, 300, 400):  # the last: the sensor gave nothing
        take(t, clock, at)
    assert t.samples == (Sample(100, 40.0), Sample(200, 44.5), Sample(300, 42.0))
    assert t.reading(150, 350) == 44.5
    assert t.reading(300, 300) == 42.0  # inclusive ends


def test_a_turn_shorter_than_the_interval_takes_the_latest_sample_before_it_while_fresh() -> None:
    clock = StepClock(step_ns=0, t=0)  # still between the samples the test takes
    said: list[str] = []
    t, then = thermometer_of(clock, said, interval_s=1.0)  # fresh: at most 2 intervals old
    then(40.0, 41.0)
    take(t, clock, 1_000_000_000)
    take(t, clock, 2_000_000_000)
    assert t.reading(2_500_000_000, 2_800_000_000) == 41.0
    assert t.reading(4_000_000_000, 4_100_000_000) == 41.0
    assert t.reading(4_000_000_001, 4_100_000_000) is None  # sampling stalled: no reading
    assert t.reading(0, 500) is None  # before any sample


def test_turns_ending_after_a_failure_have_no_reading_and_earlier_ones_keep_theirs() -> None:
    clock = StepClock(step_ns=0, t=0)  # still between the samples the test takes
    said: list[str] = []
    t, then = thermometer_of(clock, said)
    then(40.0, ThermalError("temperature command 'x' failed (exit 1)"), 99.0)
    take(t, clock, 100)
    take(t, clock, 500)  # fails here
    take(t, clock, 900)  # not asked again: 99.0 stays queued
    assert t.samples == (Sample(100, 40.0),)
    assert t.reading(50, 499) == 40.0
    assert t.reading(50, 500) is None and t.reading(600, 700) is None
    assert said == [
        "temperature command 'x' failed (exit 1); temp_c stays empty for the rest of the run (never invented)"
    ]


def test_parse_accepts_one_number_only() -> None:
    assert parse_celsius("c", "\n 47.5 \n") == 47.5
    assert parse_celsius("c", "-40") == -40.0 and parse_celsius("c", "150") == 150.0
    with pytest.raises(ThermalError, match="not a temperature"):
        parse_celsius("c", "inf")


# the replay's option


def test_temp_command_reaches_probe_and_leaves_config_id_alone() -> None:
    fixtures = ["fx"]
    plain = load_config(None, overrides(parse_args(fixtures)))
    args = parse_args([*fixtures, "--temp-command", "ssh board cat /sys/class/thermal/thermal_zone0/temp"])
    assert overrides(args)["probe"] == {"temp_command": "ssh board cat /sys/class/thermal/thermal_zone0/temp"}
    cfg = load_config(None, overrides(args))
    assert cfg.probe.temp_command == "ssh board cat /sys/class/thermal/thermal_zone0/temp"
    assert cfg.config_id("q", {}) == plain.config_id("q", {})  # sampling beside a run changes no latency
    assert "probe" not in overrides(parse_args(fixtures))


def test_replay_accepts_temp_command_and_records_every_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fixtures = make_fixtures(tmp_path / "fx", ["q1", "q2"])
    sim = ["--config", str(ROOT / "configs" / "simulator.toml"), "--clock", "virtual", "--rounds", "2"]
    code = main([str(fixtures), *sim, "--temp-command", "echo hot", "--out", str(tmp_path / "o"), "--quiet"], env={})
    assert code == 0, capsys.readouterr().err
    rows = read_bench_csv(tmp_path / "o" / "bench.csv")
    assert [(r.ok, r.temp_c) for r in rows] == [(1, None)] * 4  # the virtual clock: nothing sampled


# The thermometer samples only on the real clock, where the simulator's latencies and its answers' audio
# (played at real-time speed) would cost five seconds a turn: no latency and a two-token answer (under 0.4 s)
# leave turns that still outlast a temperature command's first answer many times over. Sampling every 100 ms,
# a source that was not dropped after its garbage would be asked (and would complain) a dozen times more.
SHORT_TURNS = """
[probe]
temp_interval_ms = 100
[asr]
latency = { first_ms = 0, jitter_ms = 0 }
[llm]
max_tokens = 2
latency = { first_ms = 0, per_item_ms = 0, jitter_ms = 0 }
tool_latency = { first_ms = 0 }
[tts]
first_frame = { first_ms = 0, jitter_ms = 0 }
real_time_factor = 0
"""


def test_a_garbage_temperature_command_is_reported_once_and_the_run_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixtures = make_fixtures(tmp_path / "fx", ["q1", "q2"])
    short = tmp_path / "short-turns.toml"
    short.write_text(SHORT_TURNS)
    sim = ["--config", str(ROOT / "configs" / "simulator.toml"), "--config", str(short), "--fast"]
    args = [str(fixtures), *sim, "--rounds", "2", "--temp-command", "echo hot", "--out", str(tmp_path / "o")]
    assert main([*args, "--quiet"], env={}) == 0
    assert capsys.readouterr().err.count("temperature command 'echo hot' printed 'hot', not a number") == 1
    rows = read_bench_csv(tmp_path / "o" / "bench.csv")
    assert [(r.ok, r.temp_c) for r in rows] == [(1, None)] * 4
