"""Sweeps (M15): one variable per sweep, one run per point, sweep.json, and the report's reading of it.

The end-to-end sweep runs the replay on the virtual clock with the scripted stages, so its
numbers are exact; the report's reading is also checked on rows built here, where the growth
of each segment is chosen.
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from pipeline.analysis import facts as turn_facts
from pipeline.analysis.sweep_file import NotASweepRecord
from pipeline.analysis.traces import ReadSpan
from pipeline.analysis.turns import TurnSpans
from pipeline.records.bench_csv import read_bench_csv
from pipeline.records.turn_row import TurnRow
from pipeline.report.build import build
from pipeline.report.document import Document, Paragraph
from pipeline.report.identity import _question_orders
from pipeline.report.load import Dataset, RunInfo, load_paths
from pipeline.report.sections import segments
from pipeline.report.sections.base import Context
from pipeline.report.sweeps import read_sweeps
from pipeline.settings.config import Config, LlmConfig, load_config
from pipeline.settings.models import REGISTRY
from pipeline.sweep.__main__ import main, run_sweep
from pipeline.sweep.points import Point, SweepPlan, make_plan, parse_vary, slug, toml_text
from pipeline.sweep.record import SweepRecord, new_record, save
from pipeline.sweep.runner import RunOptions
from pipeline.sweep.variables import MODEL_SIZES, SweepError, get_variable, overrides, warnings
from pipeline.tracing import names
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
FIXTURES = ROOT / "audio_fixtures"
SIMULATOR = ROOT / "configs" / "simulator.toml"
FAST = ["--config", str(SIMULATOR), "--clock", "virtual", "--limit", "2", "--rounds", "2"]


# --- planning ------------------------------------------------------------------------------


def test_a_sweep_varies_exactly_one_variable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([str(FIXTURES), "--vary", "max_tokens=8,16", "--vary", "threads=1,2", "--out", str(tmp_path), *FAST])
    assert code == 2
    assert "a sweep varies exactly one variable (M15), got 2 (max_tokens, threads)" in capsys.readouterr().err
    assert not (tmp_path / "sweep.json").exists()


@pytest.mark.parametrize(
    ("vary", "message"),
    [
        ("max_tokens=32", "a sweep needs at least two values"),
        ("max_tokens=32,32,64", "value(s) listed twice: 32"),
        ("max_tokens=32,lots", "max_tokens=lots: a whole number is expected"),
        ("temperature=0,1", "unknown variable 'temperature'"),
        ("prompt_cache=off,sometimes", "choose from off, prefix, carry"),
        ("max_tokens", "write NAME=V1,V2,..."),
    ],
)
def test_bad_values_are_refused_before_anything_runs(vary: str, message: str) -> None:
    with pytest.raises(SweepError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_vary([vary])


def test_model_sizes_are_the_packaged_models_and_each_point_overrides_one_setting() -> None:
    assert MODEL_SIZES == {"small": "smollm2-135m", "default": "qwen2.5-coder-0.5b", "large": "qwen2.5-coder-1.5b"}
    assert set(MODEL_SIZES.values()) <= set(REGISTRY)
    variable, values = parse_vary(["model=small,default,large,/models/mine.gguf"])
    plan = make_plan("s1", variable, values, Config())
    assert [p.run_id for p in plan.points] == ["s1-model-small", "s1-model-default", "s1-model-large", "s1-model-mine"]
    assert [p.overrides for p in plan.points][::3] == [
        {"llm": {"model": "smollm2-135m"}},
        {"llm": {"model": "/models/mine.gguf"}},
    ]
    assert toml_text(plan.points[0].overrides) == '[llm]\nmodel = "smollm2-135m"\n'


def test_a_network_sweep_holds_the_emulated_cloud_and_varies_only_the_profile() -> None:
    base = load_config(SIMULATOR)
    variable = get_variable("network")
    lan, internet = (overrides(variable, v, base) for v in ("lan", "internet"))
    assert lan == {
        "llm": {"impl": "openai", "model": "emulated-cloud"},
        "cloud": {"emulator": "fast-70b-api"},
        "network": {"profile": "lan"},
        "run": {"condition": "A"},
    }
    assert {k: v for k, v in internet.items() if k != "network"} == {k: v for k, v in lan.items() if k != "network"}
    cloud = Config(llm=LlmConfig(impl="openai"), cloud=base.cloud.__class__(emulator="busy"))
    assert overrides(variable, "lan", cloud) == {"network": {"profile": "lan"}}


def test_a_sweep_of_one_backends_setting_warns_before_running_on_another_backend() -> None:
    scripted, local = load_config(SIMULATOR), load_config(ROOT / "configs" / "local.toml")
    [refused] = warnings(get_variable("threads"), scripted)
    assert "[llm] impl = 'scripted' has no threads (another backend's setting): every point will be refused" in refused
    assert warnings(get_variable("threads"), local) == warnings(get_variable("max_tokens"), scripted) == []
    assert "changes only a label" in warnings(get_variable("model"), scripted)[0]
    [in_process] = warnings(get_variable("parallel"), local)  # llama-server's slots: impl = "server" only
    assert "[llm] impl = 'llama' has no parallel (another backend's setting)" in in_process
    served = load_config(ROOT / "configs" / "local.toml", {"llm": {"impl": "server"}})
    assert warnings(get_variable("parallel"), served) == []


def test_condition_points_may_differ_in_any_backends_own_settings_never_in_the_llm_roles() -> None:
    may = get_variable("condition").settings

    def allowed(key: str) -> bool:
        return any(fnmatch.fnmatchcase(key, pattern) for pattern in may)

    assert all(map(allowed, ("llm.impl", "llm.model", "llm.n_ctx", "llm.prompt_cache", "llm.latency.first_ms")))
    assert not any(map(allowed, ("llm.max_tokens", "llm.mode", "llm.temperature", "llm.tool_latency.first_ms")))


def test_condition_points_a_b_and_offline() -> None:
    variable, values = parse_vary(["condition=A,B,B'"])
    plan = make_plan("c", variable, values, Config())
    assert [(p.run_id, p.module) for p in plan.points] == [
        ("c-condition-A", "pipeline.replay"),
        ("c-condition-B", "pipeline.replay"),
        ("c-condition-Bp", "pipeline.offline"),
    ]
    assert plan.points[0].overrides["network"] == {"profile": "internet"}
    assert plan.points[1].overrides == {"run": {"condition": "B"}}
    assert slug("/a/b/qwen.gguf") == "qwen" and slug("B'") == "Bp"


# --- a sweep end to end (virtual clock, scripted stages) ---------------------------------


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    out = tmp_path_factory.mktemp("sweep")
    code = main([str(FIXTURES), "--vary", "max_tokens=0,4,32", "--out", str(out), "--name", "t", "--no-report", *FAST])
    return out, code


def test_each_point_is_a_run_with_its_own_config_id_recorded_in_sweep_json(swept: tuple[Path, int]) -> None:
    out, code = swept
    assert code == 1  # max_tokens=0 failed; the other points ran
    record = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
    (sweep,) = record["sweeps"]
    assert (sweep["sweep_id"], sweep["variable"], sweep["settings"]) == ("t", "max_tokens", ["llm.max_tokens"])
    assert [(p["value"], p["run_id"], p["status"]) for p in sweep["points"]] == [
        ("0", "t-max_tokens-0", "failed"),
        ("4", "t-max_tokens-4", "ok"),
        ("32", "t-max_tokens-32", "ok"),
    ]
    assert "[llm] max_tokens = 0: must be positive" in sweep["points"][0]["error"]
    assert sweep["finished"]
    rows = read_bench_csv(out / "bench.csv")
    by_run = {r.run_id: r.config_id for r in rows}
    ran = sweep["points"][1:]
    assert {p["run_id"]: p["config_id"] for p in ran} == by_run
    assert len(set(by_run.values())) == 2 and all(p["turns"] == 4 for p in ran)
    assert (out / "sweep" / "t" / "32.toml").read_text(encoding="utf-8") == "[llm]\nmax_tokens = 32\n"


def test_a_second_sweep_with_the_same_name_is_refused(
    swept: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = swept
    code = main([str(FIXTURES), "--vary", "max_tokens=4,32", "--out", str(out), "--name", "t", "--no-report", *FAST])
    assert code == 2
    assert "already holds run(s) t-max_tokens-4, t-max_tokens-32" in capsys.readouterr().err


def test_the_report_names_the_segment_that_grows(swept: tuple[Path, int]) -> None:
    out, _ = swept
    doc = build(load_paths([out]), draw=False)
    table = doc.table("sweep-t")
    assert table.headers == ("", "max_tokens=0", "max_tokens=4", "max_tokens=32", "attribution")
    cells = {r[0]: r[1:] for r in table.rows}
    assert cells["run"] == ("t-max_tokens-0", "t-max_tokens-4", "t-max_tokens-32", "-")
    assert cells["generation (ms)"] == (
        "not measured (point failed)",
        "147.9 / 170.3 · 2/2",
        "447.0 / 520.5 · 2/2",
        "measured",
    )
    text = doc.text()
    assert (
        "Bottleneck (median): generation grows most with max_tokens: median 147.9 ms at max_tokens=4 -> 447.0 ms "
        "at max_tokens=32 (+299.0 ms [" in text
    )
    assert "Point max_tokens=0 (t-max_tokens-0) failed: settings refused:" in text
    assert "sweep t: 1 point(s) not measured" in text  # the status line


def test_a_sweep_folder_is_reported_as_its_sweep_not_as_a_refused_comparison(swept: tuple[Path, int]) -> None:
    out, _ = swept
    doc = build(load_paths([out]), draw=False)
    assert doc.comparable  # its points differ by design: in the sweep's variable only
    text = doc.text()
    assert "COMPARISON REFUSED" not in text and "Refused (M11)" not in text
    assert "The sections below compare conditions" not in text  # the condition sections are left out


def test_a_many_device_run_is_not_refused_for_its_rotated_question_orders(tmp_path: Path) -> None:
    from pipeline.replay import main as replay

    for run_id, condition in (("r1", "B"), ("r2", "A")):
        args = [str(FIXTURES), *FAST, "--devices", "3", "--concurrency", "1", "--condition", condition]
        assert replay([*args, "--out", str(tmp_path), "--run-id", run_id, "--quiet"], env={}) == 0
    doc = build(load_paths([tmp_path]), draw=False)
    assert doc.comparable, doc.text()[:2000]
    # the order compared is the first device's: the devices' turns interleave differently run to run
    rows: list[TurnRow] = [
        TurnRow(run_id=run, round=1, device=d, question_id=q, turn_start_ns=t)
        for run, shift in (("x", 0), ("y", 5))
        for d, q, t in ((0, "q1", 10), (1, "q2", 10 + shift), (0, "q2", 20), (1, "q1", 21 - shift))
    ]
    assert set(_question_orders(rows).values()) == {("q1", "q2")}


def test_a_point_that_fails_at_run_time_is_recorded_and_the_next_one_runs(tmp_path: Path) -> None:
    variable, values = parse_vary(["max_tokens=4,8"])
    good = make_plan("r", variable, values, Config()).points
    broken = Point(good[0].value, good[0].run_id, good[0].overrides, module="pipeline.no_such_module")
    plan = SweepPlan("r", variable, (broken, good[1]))
    options = RunOptions(ROOT, FIXTURES, (SIMULATOR,), tmp_path, 2, 1, clock="virtual")
    record = new_record(plan, FIXTURES, [SIMULATOR], 2, 1, "now")
    first, second = run_sweep(plan, options, record)
    assert (first.status, first.exit_code, first.turns) == ("failed", 1, 0)
    assert "No module named pipeline.no_such_module" in first.error
    assert (second.status, second.turns) == ("ok", 2)
    saved = json.loads((tmp_path / "sweep.json").read_text(encoding="utf-8"))["sweeps"][0]["points"]
    assert [p["status"] for p in saved] == ["failed", "ok"]


# --- the report's reading on rows built here ---------------------------------------------


def _rows(run_id: str, condition: str, queue: list[float] | None, first: list[float], **extra: Any) -> list[TurnRow]:
    rows: list[TurnRow] = []
    for i, ft in enumerate(first):
        row = TurnRow(
            run_id=run_id,
            condition=condition,
            config_id=f"cfg-{run_id}",
            question_id=f"q{i % 4}",
            round=2,
            warmup=0,
            ok=1,
            first_token_ms=ft,
            llm_first_token_ms_per_call=str(ft),
            llm_generation_ms=400.0,
            asr_ms=300.0 + i,
            whole_turn_ms=3000.0 + ft,
            queue_wait_ms=None if queue is None else queue[i],
        )
        rows.append(msgspec.structs.replace(row, **{k: v[i] if isinstance(v, list) else v for k, v in extra.items()}))
    return rows


def _dataset(tmp_path: Path, rows: list[TurnRow], runs: dict[str, RunInfo]) -> Dataset:
    data = Dataset.of_rows(rows, str(tmp_path), runs=runs)
    data.files = [str(tmp_path / "traces" / f"{r}.jsonl") for r in runs]
    return data


def _run(run_id: str, settings: dict[str, Any]) -> RunInfo:
    return RunInfo(run_id, "B", (f"cfg-{run_id}",), json.dumps(settings), 1)


def _record(tmp_path: Path, variable: str, setting: str, values: list[str]) -> None:
    points = [
        {"value": v, "run_id": f"s-{variable}-{v}", "status": "ok", "config_id": f"cfg-s-{variable}-{v}",
         "overrides": {setting.split(".")[0]: {setting.split(".")[1]: v}}}
        for v in values
    ]  # fmt: skip
    record = {"sweeps": [{"sweep_id": "s", "variable": variable, "settings": [setting], "points": points}]}
    (tmp_path / "sweep.json").write_text(json.dumps(record), encoding="utf-8")


def _devices_sweep(tmp_path: Path, other: dict[str, Any] | None = None, spans: bool = False) -> Document:
    waits = {"1": [0.0] * 8, "2": [0.0, 40, 80, 120, 0, 60, 90, 150], "4": [300.0, 350, 420, 500, 380, 330, 460, 410]}
    rows: list[TurnRow] = []
    runs = {}
    for value, queue in waits.items():
        run_id = f"s-devices-{value}"
        rows += _rows(run_id, "B", queue, [350.0 + q + i for i, q in enumerate(queue)])
        runs[run_id] = _run(run_id, {"fleet": {"devices": int(value)}, "llm": {"max_tokens": 64}, **(other or {})})
    if other:
        runs["s-devices-4"] = _run("s-devices-4", {"fleet": {"devices": 4}, "llm": {"max_tokens": 128}})
    _record(tmp_path, "devices", "fleet.devices", list(waits))
    data = _dataset(tmp_path, rows, runs)
    if spans:  # each call's queue wait inside its llm.call span, as the scheduler records it
        turn = _span(names.TURN, 0, 10**10)
        call = _span(names.LLM_CALL, 0, 10**9)
        data.turns = [
            TurnSpans(turn, [call, _span(names.LLM_QUEUE, 0, int(_number(r.queue_wait_ms) * 1e6))]) for r in rows
        ]
    return build(data, draw=False)


def test_a_devices_sweep_shows_the_queue_growing_with_the_devices(tmp_path: Path) -> None:
    doc = _devices_sweep(tmp_path)
    rows = {r[0]: r[1:] for r in doc.table("sweep-s").rows}
    assert rows["queue wait in the scheduler (ms)"] == (
        "0.0 / 0.0 · 8/8",
        "70.0 / 129.0 · 8/8",
        "395.0 / 472.0 · 8/8",
        "measured",
    )
    text = doc.text()
    # without spans the queue's place is unknown: the wider segment is named, the queue comes next
    named = "Bottleneck (median): first-token wait, all calls grows most with devices: median 353.5 ms at devices=1"
    assert named in text
    assert "Next: queue wait in the scheduler +395.0 ms;" in text
    assert "End to end over the same points (M17):" in text and "whole turn median 3353.5 ms at devices=1" in text


def test_a_queue_inside_the_first_token_wait_is_named_as_the_bottleneck(tmp_path: Path) -> None:
    text = _devices_sweep(tmp_path, spans=True).text()
    assert (
        "Bottleneck (median): queue wait in the scheduler, inside the first-token wait. The first-token wait grows "
        "most with devices (median 353.5 ms at devices=1 -> 750.5 ms at devices=4, +397.0 ms ["
    ) in text
    assert "queue wait in the scheduler is 99% of that (median 0.0 ms at devices=1 -> 395.0 ms at devices=4" in text
    assert "growing at every step (0.0 -> 70.0 -> 395.0 ms)" in text


def test_a_sweep_whose_runs_differ_in_more_than_the_variable_is_refused(tmp_path: Path) -> None:
    doc = _devices_sweep(tmp_path, other={"scheduler": {"concurrency": 1}})
    assert "Refused (M11): settings other than devices differ: llm.max_tokens, scheduler.concurrency." in doc.text()
    assert "sweep-s" not in doc.table_keys()


def test_a_model_sweep_states_quality_beside_latency_and_needs_it(tmp_path: Path) -> None:
    rows: list[TurnRow] = []
    runs = {}
    for value, first, quality in (("small", 200.0, 0.25), ("large", 900.0, 0.75)):
        run_id = f"s-model-{value}"
        rows += _rows(run_id, "B", None, [first + i for i in range(6)], answer_quality=quality, asr_error_rate=0.1)
        runs[run_id] = _run(run_id, {"llm": {"model": value}})
    _record(tmp_path, "model", "llm.model", ["small", "large"])
    text = build(_dataset(tmp_path, rows, runs), draw=False).text()
    assert (
        "Quality beside latency (M18; answer quality: mean share of expected keywords): model=small: first-token "
        "wait 202.5 ms, whole turn 3202.5 ms, answer quality 0.25, ASR error rate 0.100; model=large: first-token "
        "wait 902.5 ms, whole turn 3902.5 ms, answer quality 0.75, ASR error rate 0.100."
    ) in text
    rows = [msgspec.structs.replace(row, answer_quality=None) for row in rows]
    doc = build(_dataset(tmp_path, rows, runs), draw=False)
    assert "No quality check (M18)" in doc.text()
    assert "no quality check for a model-size sweep (M18)" in doc.text()


# --- the four segments gain a measured queue ---------------------------------------------


def test_the_segments_table_shows_a_measured_queue_for_b(tmp_path: Path) -> None:
    rows = _rows("a", "A", None, [500.0, 520, 540]) + _rows("b", "B", [10.0, 20, 30], [300.0, 320, 340])
    data = _dataset(tmp_path, rows, {})
    ctx = Context(data, draw=False)
    client, _ = segments.segment_tables(ctx.labels, ctx.conds, {"B": turn_facts.Q_INSIDE})
    queue, _, _, wait, rest, _ = client.rows
    assert queue[0] == "queue (scheduler, ms)" and queue[-1] == "measured (llm.queue spans)"
    assert queue[1] == segments.INSIDE and queue[2].startswith("20.0 [") and queue[2].endswith("· 3/3")
    assert wait[0].startswith("first-token wait") and wait[2].startswith("320.0 [")
    assert rest[0] == "network + first-token inference = first-token wait - queue (ms)"
    assert (rest[1], rest[2][:7], rest[-1]) == ("- (no queue measured)", "300.0 [", "estimated (derived)")
    notes = [b.text for b in segments.section(ctx) if isinstance(b, Paragraph)]
    assert (
        "B (local): queue measured, median 20.0 ms per turn (3/3 turns); where it lies against the first-token "
        "wait could not be read (no spans behind these rows)."
    ) in notes
    assert any(n.startswith("No server timings from B (local): network and first-token inference") for n in notes)


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def _span(name: str, start: int, end: int) -> ReadSpan:
    return ReadSpan("t", f"{name}{start}", "turn", name, start, end, {}, ())


def test_where_the_queue_lies_is_read_from_the_spans() -> None:
    turn = _span(names.TURN, 0, 100)
    inside = TurnSpans(turn, [_span(names.LLM_CALL, 10, 90), _span(names.LLM_QUEUE, 10, 40)])
    before = TurnSpans(turn, [_span(names.LLM_QUEUE, 0, 10), _span(names.LLM_CALL, 10, 90)])

    def placement(turns: list[TurnSpans]) -> str | None:
        return turn_facts.placement(turn_facts.queue_places(t) for t in turns)

    assert placement([inside]) == turn_facts.Q_INSIDE
    assert placement([before]) == turn_facts.Q_BEFORE
    assert placement([inside, before]) == turn_facts.Q_MIXED
    assert placement([TurnSpans(turn, [_span(names.LLM_CALL, 10, 90)])]) is None


def test_what_falls_is_said_and_background_load_between_points_is_flagged(tmp_path: Path) -> None:
    rows: list[TurnRow] = []
    runs = {}
    for value, first, busy in (("large", 900.0, 0.0), ("small", 200.0, 0.8)):
        run_id = f"s-model-{value}"
        rows += _rows(run_id, "B", None, [first + i for i in range(6)], answer_quality=1.0, other_cpu_share=busy)
        runs[run_id] = _run(run_id, {"llm": {"model": value}})
    _record(tmp_path, "model", "llm.model", ["large", "small"])
    text = build(_dataset(tmp_path, rows, runs), draw=False).text()
    assert "No segment's median grows from model=large to small." in text
    assert (
        "What falls most instead: first-token wait, all calls, median 902.5 ms at model=large -> 202.5 ms at "
        "model=small (-700.0 ms ["
    ) in text
    assert (
        "Background load was not held (M9): other processes kept the machine busy during the sweep (model=large: "
        "0 of 6 turns busy, median 0.00 cores; model=small: 6 of 6 turns busy, median 0.80 cores)."
    ) in text


def test_sweep_json_is_read_one_way_by_the_sweep_that_adds_to_it_and_the_report(tmp_path: Path) -> None:
    (tmp_path / "sweep.json").write_text('{"format": "voice-latency-lab sweep 1"}', encoding="utf-8")
    with pytest.raises(NotASweepRecord, match=r"sweep\.json: not a sweep record \(no 'sweeps' list\)"):
        save(tmp_path, SweepRecord("s1", "llm.model", [], "fixtures", [], 2, 1, "now", []))
    found = read_sweeps([str(tmp_path / "traces" / "run.jsonl")])
    assert found == ([], [f"{tmp_path / 'sweep.json'}: not a sweep record (no 'sweeps' list)"])
