# ruff: noqa: E501  (exact tables read best one row per line)
"""The report's exact tables on the fixed trace files of tests/data/report (see tests/report_fixtures.py).

The traces come from the virtual clock, so every number is exact; the intervals come from
the bootstrap's fixed seed. Trace and span ids are random and never asserted.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipeline.analysis.stats import summarize
from pipeline.records.bench_csv import read_bench_csv
from pipeline.report.build import build
from pipeline.report.document import Document
from pipeline.report.load import load_paths
from tests.paths import TEST_DATA

DATA = TEST_DATA / "report"
EXPERIMENT = DATA / "experiment"
NM = "not measured"
NO_SENSOR = "not measured (no sensor reading)"
NO_SERVER = "not measured (the server reported no timings)"
SUM = "not measured (the client sees only the sum below)"


@pytest.fixture(scope="module")
def doc() -> Document:
    return build(load_paths([EXPERIMENT]), draw=False)


def test_the_result_table_m23(doc: Document) -> None:
    t = doc.table("result")
    assert t.headers == ("metric", "A (cloud)", "B (local)", "B' (offline)", "attribution")
    assert t.rows == (
        ("silence median (ms)", "2427.1 [2377.3, 2680.2] · 6/6", "2834.2 [1954.2, 3044.4] · 6/6", "2870.8 [1977.1, 3075.3] · ⚠ 5/6", "measured"),
        ("silence P90 (ms)", "2680.2 [2427.1, 2787.0] · 6/6", "3044.4 [2797.6, 3075.3] · 6/6", "3050.6 [2841.5, 3075.3] · ⚠ 5/6", "measured"),
        ("first-token median (ms)", "531.8 [482.9, 588.7] · 6/6", "302.0 [293.8, 311.5] · 6/6", "300.3 [287.9, 312.5] · ⚠ 5/6", "measured"),
        ("first-token P90 (ms)", "588.7 [531.8, 594.8] · 6/6", "311.5 [302.0, 312.5] · 6/6", "308.9 [300.0, 312.5] · ⚠ 5/6", "measured"),
        ("whole-turn median (ms)", "4644.6 [4477.3, 5262.6] · 6/6", "4994.2 [4284.8, 5684.4] · 6/6", "5030.8 [4309.3, 5715.3] · ⚠ 5/6", "measured"),
        ("LLM calls per turn", "mean 2.00 (median 2, 2-2) · 6/6", "mean 2.00 (median 2, 2-2) · 6/6", "mean 2.00 (median 2, 2-2) · ⚠ 5/6", "measured"),
        ("success rate", "6/6 (100.0%)", "6/6 (100.0%)", "5/6 (83.3%)", "measured"),
        ("temperature range", NO_SENSOR, NO_SENSOR, NO_SENSOR, "measured"),
    )  # fmt: skip
    text = doc.text()
    assert "Status: INCOMPLETE (M12): 3 cell(s) of the result table not measured." in text
    assert "Not measured (left empty, never filled from a cited source): A (cloud): temperature range;" in text
    assert "⚠ marks a figure computed over fewer than all measured turns" in text


def test_result_medians_are_those_of_pipeline_stats() -> None:
    rows = read_bench_csv(EXPERIMENT / "bench.csv")
    for condition, cell in (("A", "531.8"), ("B", "302.0"), ("B'", "300.3")):
        s = summarize([r for r in rows if r.condition == condition], "first_token_ms")
        assert f"{s.median:.1f}" == cell


def test_four_segments_client_and_server_view(doc: Document) -> None:
    assert doc.table("segments-client").rows == (
        ("queue", SUM, SUM, SUM, "-"),
        ("network", SUM, SUM, SUM, "-"),
        ("first-token inference", SUM, SUM, SUM, "-"),
        ("first-token wait = queue + network + first-token inference (ms)", "1041.1 [941.9, 1102.7] · 6/6", "600.2 [583.7, 610.5] · 6/6", "598.9 [582.1, 614.2] · ⚠ 5/6", "measured"),
        ("generation (first token to end of call, ms)", "416.6 [335.5, 495.4] · 6/6", "1091.8 [805.4, 1336.3] · 6/6", "1098.7 [800.8, 1353.8] · ⚠ 5/6", "measured"),
    )  # fmt: skip
    assert doc.table("segments-server").rows == (
        ("queue (ms)", NO_SERVER, "3.5 [3.5, 3.5] · 6/6", "3.5 [3.5, 3.5] · ⚠ 5/6", "measured (server-reported)"),
        ("network = client first-token wait - server queue - server prompt (ms)", NO_SERVER, "0.6 [0.6, 0.6] · 6/6", "0.6 [0.6, 0.6] · ⚠ 5/6", "estimated (derived)"),
        ("first-token inference = prompt processing (ms)", NO_SERVER, "596.1 [579.6, 606.4] · 6/6", "594.8 [578.0, 610.1] · ⚠ 5/6", "measured (server-reported)"),
        ("generation (ms)", NO_SERVER, "1091.4 [805.0, 1335.9] · 6/6", "1098.3 [800.4, 1353.4] · ⚠ 5/6", "measured (server-reported)"),
    )  # fmt: skip
    assert (
        "No server timings from A (cloud): queue, network and first-token inference cannot be separated" in doc.text()
    )


def test_per_sentence_first_tokens_and_amplification(doc: Document) -> None:
    assert doc.table("sentences").rows == (
        ("success rate", "6/6 (100.0%)", "6/6 (100.0%)", "5/6 (83.3%)", "measured"),
        ("sentences (measured successful turns)", "8", "8", "6", "measured"),
        ("per-sentence first token: min (ms)", "0.0", "0.0", "0.0", "measured"),
        ("per-sentence first token: median (ms)", "461.7", "290.3", "290.3", "measured"),
        ("per-sentence first token: P90 (ms)", "536.0", "302.7", "305.9", "measured"),
        ("per-sentence first token: max (ms)", "603.2", "313.9", "313.9", "measured"),
        ("LLM calls (measured successful turns)", "12", "12", "10", "measured"),
        ("per-call first token: median (ms)", "512.6", "298.8", "298.8", "measured"),
        ("per-call first token: P90 (ms)", "593.6", "312.3", "312.6", "measured"),
        ("LLM calls per turn", "mean 2.00 (2-2)", "mean 2.00 (2-2)", "mean 2.00 (2-2)", "measured"),
        ("sentences per turn", "mean 1.33 (1-2)", "mean 1.33 (1-2)", "mean 1.20 (1-2)", "measured"),
    )
    amp = doc.table("amplification")
    assert amp.headers[3] == "difference x calls per turn (estimated)"
    assert amp.rows == (
        ("B - A", "-213.8 ms [-263.5, -168.5]", "2.00", "-427.7 ms", "-440.9 ms [-502.6, -341.7]", "+349.6 ms [-606.5, +1097.5]"),
        ("B' - A", "-213.8 ms [-263.5, -168.5]", "2.00", "-427.7 ms", "-442.3 ms [-503.9, -343.1]", "+386.1 ms [-424.1, +1170.4]"),
        ("B' - B", "+0.0 ms [-12.4, +10.0]", "2.00", "+0.0 ms", "-1.3 ms [-22.0, +17.8]", "+36.6 ms [-721.5, +1344.2]"),
    )  # fmt: skip


def test_dilution_shows_the_segment_and_the_whole_turn_together(doc: Document) -> None:
    llm, seg, whole = (
        "LLM first token (first call)",
        "LLM segment (first request to last call's end)",
        "whole turn (end of speech to last audio played)",
    )
    assert doc.table("dilution").rows == (
        ("B - A", llm, "531.8", "302.0", "-229.8 ms [-286.7, -179.3]", "-43.2%", "6/6; 6/6"),
        ("B - A", seg, "1468.1", "1725.2", "+257.1 ms [-68.2, +526.7]", "+17.5%", "6/6; 6/6"),
        ("B - A", whole, "4644.6", "4994.2", "+349.6 ms [-606.5, +1097.5]", "+7.5%", "6/6; 6/6"),
        ("B' - A", llm, "531.8", "300.3", "-231.5 ms [-288.4, -182.6]", "-43.5%", "6/6; ⚠ 5/6"),
        ("B' - A", seg, "1468.1", "1740.2", "+272.1 ms [-53.8, +593.7]", "+18.5%", "6/6; ⚠ 5/6"),
        ("B' - A", whole, "4644.6", "5030.8", "+386.1 ms [-424.1, +1170.4]", "+8.3%", "6/6; ⚠ 5/6"),
        ("B' - B", llm, "302.0", "300.3", "-1.7 ms [-15.7, +12.2]", "-0.6%", "6/6; ⚠ 5/6"),
        ("B' - B", seg, "1725.2", "1740.2", "+15.0 ms [-297.7, +484.1]", "+0.9%", "6/6; ⚠ 5/6"),
        ("B' - B", whole, "4994.2", "5030.8", "+36.6 ms [-721.5, +1344.2]", "+0.7%", "6/6; ⚠ 5/6"),
    )
    assert (
        "B vs A: the LLM segment changed by +257.1 ms (+17.5%), the whole turn by +349.6 ms (+7.5%): "
        "the other stages did not change, so the end-to-end change is diluted (M17)." in doc.text()
    )


def test_outcomes_conclusion_and_boundaries(doc: Document) -> None:
    assert doc.table("outcomes").rows == (
        ("B vs A", "faster", "median difference -229.8 ms (-43.2%), 95% interval [-286.7, -179.3] ms: entirely below zero", "record it as the recommended configuration"),
        ("B' vs A", "less reliable", "success 83.3% against 100.0% (more than 5 percentage points lower)", "fix stability before comparing speed"),
    )  # fmt: skip
    text = doc.text()
    assert (
        "B works (6/6) and B' fails (5/6 succeeded): the chain is NOT fully local (M13). "
        "Failed turns: ConnectionError (1); failed component(s): tts (1 turn(s))."
    ) in text
    assert (
        "B (local) against A (cloud): gain: first token (median) 229.8 ms lower (-43.2%); first-token P90 (jitter "
        "and tail) 277.3 ms lower (-47.1%). Cost: LLM-segment P90 336.3 ms higher (+20.5%). Not distinguishable "
        "from no change (95% interval includes zero): LLM segment (median) +257.1 ms (+17.5%), whole turn (median) "
        "+349.6 ms (+7.5%), whole-turn P90 +421.8 ms (+8.0%). (Simulated stages: this describes the simulator's "
        "settings, not real models.)"
    ) in text
    assert "B' (offline) against A (cloud): gain: first token (median) 231.5 ms lower (-43.5%)" in text
    assert "Cost: LLM-segment P90 343.0 ms higher (+20.9%); success rate -16.7 points." in text
    boundaries = text[text.index("Boundaries (M21)") :]
    for phrase in (
        "weaker than a cloud 70B-class model",
        "TTS voice quality",
        "centralised and a distributed",
        "depends on temperature",
    ):
        assert phrase in boundaries


def test_integrity_tables(doc: Document) -> None:
    assert doc.table("runs").rows == (
        ("a1", "A (cloud)", "08498437283f", "virtual", "asr,llm,tts", "9", "9", "3", "6", "6/6 (100.0%)", "-", "3 x 3"),
        ("b1", "B (local)", "65059f06d2e6", "virtual", "asr,llm,tts", "9", "9", "3", "6", "6/6 (100.0%)", "-", "3 x 3"),
        ("bp1", "B' (offline)", "e8c96588724a", "virtual", "asr,llm,tts", "9", "9", "3", "6", "5/6 (83.3%)", "ConnectionError: 1", "3 x 3"),
    )  # fmt: skip
    assert doc.table("warmup").rows == (
        ("a1", "3", "464.4", "531.8", "-"),
        ("b1", "3", "290.7", "302.0", "-"),
        ("bp1", "3", "290.7", "300.3", "-"),
    )
    allowed = "may differ (defines the condition)"
    assert doc.table("settings").rows == (
        ("llm.latency.first_ms", "a1: 520.0; b1: 300.0; bp1: 300.0", allowed),
        ("llm.latency.jitter_ms", "a1: 90.0; b1: 15.0; bp1: 15.0", allowed),
        ("llm.latency.per_item_ms", "a1: 25.0; b1: 110.0; bp1: 110.0", allowed),
        ("run.condition", 'a1: "A"; b1: "B"; bp1: "B\'"', allowed),
    )
    assert doc.table("temperature").rows == (
        ("A (cloud)", NO_SENSOR, "-"),
        ("B (local)", NO_SENSOR, "-"),
        ("B' (offline)", NO_SENSOR, "-"),
    )
    assert doc.table("drift").rows == (
        ("a1", "whole_turn_ms", "6", "+0.77", "+3.9%", "no upward drift"),
        ("a1", "first_token_ms", "6", "+0.77", "+4.6%", "no upward drift"),
        ("b1", "whole_turn_ms", "6", "+0.77", "+1.1%", "no upward drift"),
        ("b1", "first_token_ms", "6", "+0.77", "+1.3%", "no upward drift"),
        ("bp1", "whole_turn_ms", "5", "-", "-", "not checked: needs 6 successful turns, has 5"),
        ("bp1", "first_token_ms", "5", "-", "-", "not checked: needs 6 successful turns, has 5"),
    )
    text = doc.text()
    assert "Comparable: the 3 config_ids differ only in what defines the condition." in text
    assert "No temperature sensor reading in any turn (temp_c empty): never invented (M9)." in text
    assert "bench.csv: same 27 turn(s) as the traces (the report is computed from the traces)" in text


def test_uncertainty_intervals_for_medians_p90s_and_differences(doc: Document) -> None:
    rows = doc.table("uncertainty").rows
    assert len(rows) == 18
    assert rows[:2] == (
        ("A (cloud)", "first token median", "531.8", "[482.9, 588.7]", "6/6"),
        ("A (cloud)", "first token P90", "588.7", "[531.8, 594.8]", "6/6"),
    )
    assert rows[-1] == ("B' (offline)", "LLM segment P90", "1981.1", "[1728.2, 2007.9]", "⚠ 5/6")
    diffs = doc.table("differences").rows
    assert diffs[:3] == (
        ("B - A", "first token median", "-229.8 ms", "[-286.7, -179.3]", "yes (interval excludes 0)", "-229.8 ms [-277.3, -189.1] (6 pairs)"),
        ("B - A", "first token P90", "-277.3 ms", "[-289.7, -219.3]", "yes (interval excludes 0)", "-"),
        ("B - A", "whole turn median", "+349.6 ms", "[-606.5, +1097.5]", "no (interval includes 0)", "+292.8 ms [-192.4, +478.5] (6 pairs)"),
    )  # fmt: skip
    assert diffs[12] == ("B' - B", "first token median", "-1.7 ms", "[-15.7, +12.2]", "no (interval includes 0)", "+0.0 ms [+0.0, +0.0] (5 pairs)")  # fmt: skip


def test_cited_figures_only_in_their_own_table_with_the_caveat(doc: Document) -> None:
    cited = doc.table("cited")
    assert cited.headers == ("stage", "typical (cited)", "attribution")
    assert {row[2] for row in cited.rows} == {"cited"}
    assert ("end to end", "1000-1300 ms (range 800-1800 ms)", "cited") in cited.rows
    for key in doc.table_keys():
        if key != "cited":
            assert not any("1000-1300" in cell or "300-600" in cell for row in doc.table(key).rows for cell in row)
    assert "it is server-side only and excludes the VAD wait" in doc.text()
    assert "The per-stage ranges could not be traced to a source." in doc.text()


def test_scripted_runs_are_flagged_at_the_top(doc: Document) -> None:
    top = doc.text().split("1. Result (M23)")[0]
    assert (
        "SIMULATED: scripted stages in run(s) a1 (A: asr,llm,tts), b1 (B: asr,llm,tts), bp1 (B': asr,llm,tts): their "
        "latencies are configured, not measured." in top
    )
    assert "Virtual clock (simulated time) in run(s): a1, b1, bp1." in top


def test_a_condition_without_runs_is_not_measured_never_filled() -> None:
    doc = build(load_paths([EXPERIMENT], runs=("b1",)), draw=False)
    result = doc.table("result")
    assert [row[1] for row in result.rows] == [NM] * 8
    assert [row[3] for row in result.rows] == [NM] * 8
    assert result.rows[2][2] == "302.0 [293.8, 311.5] · 6/6"
    text = doc.text()
    assert "Not measured (left empty, never filled from a cited source): A (cloud): every figure; B (local): " in text
    assert "The amplification needs two measured conditions; measured: B (local)." in text
    assert "The four outcomes read B against A; A (cloud) was not measured." in text
    assert "B' (offline) was not measured: that the chain runs fully offline is not shown (M13)." in text
    assert "runs left out as asked: a1, bp1" in text
    assert "bench.csv: same 9 turn(s) as the traces (the report is computed from the traces)" in text
    assert not doc.complete


def test_runs_differing_in_more_than_the_condition_are_refused(tmp_path: Path) -> None:
    shutil.copytree(EXPERIMENT / "traces", tmp_path / "traces")
    bp1 = tmp_path / "traces" / "bp1.jsonl"
    bp1.write_text(bp1.read_text(encoding="utf-8").replace('silence_ms\\":600', 'silence_ms\\":700'), encoding="utf-8")
    doc = build(load_paths([tmp_path]), draw=False)
    assert not doc.comparable and not doc.complete
    assert ("vad.silence_ms", "a1: 600; b1: 600; bp1: 700", "must not differ: blocks the comparison") in doc.table(
        "settings"
    ).rows
    text = doc.text()
    assert (
        "COMPARISON REFUSED (M11): settings other than the condition differ: vad.silence_ms. Report the runs "
        "separately, or re-run them with matching settings." in text
    )
    assert "No conclusion: the comparison was refused (M11), see Integrity." in text
    for key in ("result", "segments-client", "amplification", "dilution", "outcomes", "differences"):
        assert key not in doc.table_keys()
    assert doc.table("run-a1").rows[2] == ("first-token median (ms)", "531.8 [482.9, 588.7] · 6/6", "measured")


def test_a_run_made_to_drift_is_flagged() -> None:
    doc = build(load_paths([DATA / "drift"]), draw=False)
    assert doc.table("drift").rows == (
        ("d1", "whole_turn_ms", "8", "+0.95", "+2.2%", "no upward drift"),
        ("d1", "first_token_ms", "8", "+0.95", "+34.0%", "⚠ DRIFTING UPWARD"),
    )
    assert (
        "Run d1 drifts upward in first_token_ms: rho +0.95, second half +34.0% slower than the first (M20)."
        in doc.text()
    )
    assert doc.table("temperature").rows[1] == (
        "B (local)",
        "43.4-51.8 °C",
        "40-45 °C: 5056.9 ms (2 turns); 45-50 °C: 5200.2 ms (4 turns); 50-55 °C: 5305.0 ms (2 turns)",
    )
    assert doc.table("result").rows[-1][2] == "43.4-51.8 °C"


def test_other_condition_labels_become_extra_columns(tmp_path: Path) -> None:
    shutil.copytree(EXPERIMENT / "traces", tmp_path / "traces")
    bp1 = tmp_path / "traces" / "bp1.jsonl"
    text = bp1.read_text(encoding="utf-8")
    text = text.replace('"lab.condition","value":{"stringValue":"B\'"}', '"lab.condition","value":{"stringValue":"B2"}')
    bp1.write_text(text.replace('\\"condition\\":\\"B\'\\"', '\\"condition\\":\\"B2\\"'), encoding="utf-8")
    doc = build(load_paths([tmp_path]), draw=False)
    result = doc.table("result")
    assert result.headers == ("metric", "A (cloud)", "B (local)", "B' (offline)", "B2", "attribution")
    assert [row[3] for row in result.rows] == [NM] * 8
    assert result.rows[2][4] == "300.3 [287.9, 312.5] · ⚠ 5/6"
    assert [row[0] for row in doc.table("amplification").rows] == ["B - A", "B2 - A"]
    assert [row[1] for row in doc.table("outcomes").rows] == ["faster", "less reliable"]
    assert "Other conditions shown as extra columns: B2." in doc.text()
