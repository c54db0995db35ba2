"""The report's "what moves the silence" section on the fixed traces of tests/data/report/experiment
(a1 = A, b1 = B, bp1 = B'; see tests/report_fixtures.py), checked against the graphs themselves:
the ranking and the predictions are recomputed here from ``critical_path`` and ``predict``."""

from __future__ import annotations

import msgspec
import pytest

from pipeline.analysis.numbers import median
from pipeline.analysis.path.critical import critical_path
from pipeline.analysis.path.graph import TurnGraph
from pipeline.analysis.retiming import WhatIfError, parse_change, partners, predict, read_graphs
from pipeline.records.path import SEGMENTS
from pipeline.report.build import build
from pipeline.report.document import Document, Figure, Heading, Paragraph, Table
from pipeline.report.load import Dataset, load_paths
from pipeline.report.sections import critical_path as section
from pipeline.report.sections import whatif_defaults
from pipeline.report.sections.base import MEASURED, Context
from tests.paths import TEST_DATA

EXPERIMENT = TEST_DATA / "report" / "experiment"


@pytest.fixture(scope="module")
def data() -> Dataset:
    return load_paths([EXPERIMENT])


@pytest.fixture(scope="module")
def doc(data: Dataset) -> Document:
    return build(data, draw=False)


RUNS = {"A": "a1", "B": "b1", "B'": "bp1"}


def graphs(data: Dataset, condition: str) -> list[TurnGraph]:
    """The condition's measured (not warm-up) successful turns' graphs, read here from its trace file
    directly (the report makes them from each turn's lines when it needs them)."""
    return read_graphs([EXPERIMENT / "traces" / f"{RUNS[condition]}.jsonl"]).graphs


def test_the_section_comes_after_the_segments(doc: Document) -> None:
    headings = [b.text for b in doc.blocks if isinstance(b, Heading)]
    assert section.HEADING in headings
    assert headings.index(section.HEADING) > headings.index("2. Four segments (M2)")
    assert {"path-silence-A", "path-silence-B", "path-silence-Bp", "whatif-A", "whatif-B", "whatif-Bp"} <= set(
        doc.table_keys()
    )


def test_b_segments_ranked_by_their_share_of_the_silence(data: Dataset, doc: Document) -> None:
    paths = [critical_path(g, g.first_audible) for g in graphs(data, "B")]
    assert len(paths) == 6
    total = sum(p.total_ns for p in paths)
    owned = {k: sum(p.by_kind()[k] for p in paths) for k in SEGMENTS}
    expected = sorted((k for k in SEGMENTS if owned[k]), key=lambda k: owned[k], reverse=True)
    rows = doc.table("path-silence-B").rows
    assert [r[0] for r in rows[: len(expected)]] == expected
    assert [r[4] for r in rows[: len(expected)]] == [f"{owned[k] / total:.1%}" for k in expected]
    assert rows[len(expected)][0] == "silence: the whole path" and rows[len(expected)][4] == "100.0%"
    assert all(r[3] == "6/6" and r[-1] == MEASURED for r in rows)


def test_whatif_rows_are_labelled_predicted_never_measured(doc: Document) -> None:
    for key in ("whatif-A", "whatif-B", "whatif-Bp"):
        t = doc.table(key)
        assert "predicted from measured traces" in t.headers[3]
        assert {r[-1] for r in t.rows} == {section.PREDICTED}
    # every default answered, four figures each: A's largest segment is its first token, asked once
    assert [len({r[0] for r in doc.table(k).rows if r[1] != "refused"}) for k in ("whatif-A", "whatif-B")] == [2, 3]
    assert [r[0] for r in doc.table("whatif-B").rows][::4] == [
        "LLM first token -25 %",
        "llm.generation -25 % (the silence's largest segment)",
        "the LLM of A (cloud)",
    ]


def test_a_network_for_an_in_process_llm_is_not_asked_and_said_so(doc: Document) -> None:
    assert not [r for r in doc.table("whatif-B").rows if r[0].startswith("network")]
    assert (
        "B (local): not asked: network RTT +100 ms: the LLM ran in-process, there is no network on its path."
        in doc.text()
    )


def test_the_network_is_asked_where_the_llm_was_remote_and_the_swap_only_where_measured(data: Dataset) -> None:
    remote = [msgspec.structs.replace(g, remote_llm=True) for g in graphs(data, "B")]
    asked = whatif_defaults.defaults("B", remote, ["asr", "llm_first_token"], {"B"})
    assert [w.name for w in asked.asked] == [
        "LLM first token -25 %",
        "asr -25 % (the silence's largest segment)",
        "network RTT +100 ms",
    ]
    assert asked.left_out == ["the LLM of A (cloud): A (cloud) has no measured successful turn here"]
    assert [str(c) for w in asked.asked for c in w.changes] == [
        "llm.first_token -25%",
        "asr -25%",
        "network.rtt +100 ms",
    ]


def test_a_relative_first_token_change_is_answered_where_a_fixed_one_is_refused(data: Dataset) -> None:
    b = graphs(data, "B")  # first tokens of about 300 ms: -400 ms asks for less than nothing, -25 % never does
    with pytest.raises(WhatIfError, match="it cannot become shorter than nothing"):
        predict(b[0], (parse_change("llm.first_token=-400ms"),))
    assert len([predict(g, (parse_change(whatif_defaults.FIRST_TOKEN),)) for g in b]) == 6


def test_the_llm_swap_for_b_is_the_median_of_predict(data: Dataset, doc: Document) -> None:
    mine, theirs = graphs(data, "B"), graphs(data, "A")
    found = [predict(g, (), o) for g, o in zip(mine, partners(mine, theirs), strict=True)]
    rows = {r[1]: r for r in doc.table("whatif-B").rows if r[0] == "the LLM of A (cloud)"}
    assert rows["first audible median"][3].split()[0] == f"{median([p.audible_ns / 1e6 for p in found]):.1f}"
    assert rows["whole turn median"][3].split()[0] == f"{median([p.whole_ns / 1e6 for p in found]):.1f}"
    assert rows["first audible median"][2].split()[0] == f"{median([p.measured_audible_ns / 1e6 for p in found]):.1f}"


def test_a_first_token_25_percent_sooner_moves_each_call_on_the_path(data: Dataset, doc: Document) -> None:
    change = (parse_change(whatif_defaults.FIRST_TOKEN),)
    found = [predict(g, change) for g in graphs(data, "A")]
    (row,) = [r for r in doc.table("whatif-A").rows if r[:2] == ("LLM first token -25 %", "first audible median")]
    assert row[3].split()[0] == f"{median([p.audible_ns / 1e6 for p in found]):.1f}"
    assert row[3].endswith("· 6/6")


def test_a_change_shorter_than_nothing_is_refused(data: Dataset) -> None:
    w = whatif_defaults.WhatIf("tool -1 s", (parse_change("tool=-1000ms"),))
    said = section.predictions(data, section.turns_of(data, Context(data, draw=False).conds["B"]), w, {})
    assert isinstance(said, str) and "it cannot become shorter than nothing" in said
    assert said.startswith("the turn's tool ")


def test_without_graphs_the_section_says_so(data: Dataset) -> None:
    bare = Dataset([msgspec.structs.replace(f, lines=()) for f in data.facts], None, data.runs, data.source)
    blocks = section.section(Context(bare, draw=True))
    assert not [b for b in blocks if isinstance(b, (Table, Figure))]
    assert isinstance(blocks[1], Paragraph) and "No measured successful turn has a critical path" in blocks[1].text


def test_the_stacked_bars_are_drawn(data: Dataset) -> None:
    (figure,) = [b for b in section.section(Context(data, draw=True)) if isinstance(b, Figure)]
    assert figure.key == "critical-path" and figure.png.startswith(b"\x89PNG")


def test_a_large_condition_is_sampled_evenly_and_says_so() -> None:
    from pipeline.report.sections.critical_path import evenly

    graphs = list(range(10))  # any sequence: evenly picks by position
    assert evenly(graphs, 4) == [0, 2, 5, 7]
    assert evenly(graphs, 20) == graphs


def test_past_its_most_a_condition_is_a_sample_and_says_so(data: Dataset, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(section, "MOST", 3)
    blocks = section.section(Context(data, draw=False))
    said = [b.text for b in blocks if isinstance(b, Paragraph) and b.text.startswith("Paths and what-ifs from")]
    assert [t.split(" successful")[0] for t in said] == [f"Paths and what-ifs from 3 of the {n}" for n in (6, 6, 5)]
    (total,) = [r for r in next(b for b in blocks if isinstance(b, Table)).rows if r[0] == "silence: the whole path"]
    assert total[3] == "⚠ 3/6"  # the sample counted against every measured turn


def test_a_run_shaped_like_the_demo_gets_predictions_and_no_refusal() -> None:
    """One in-process condition, no A (``make demo``'s shape): every default asked is answered; the network
    and the swap are said to be left out, with why."""
    doc = build(load_paths([EXPERIMENT], runs=("b1",)), draw=False)
    rows = doc.table("whatif-B").rows
    assert rows and not [r for r in rows if r[1] == "refused"]
    assert {r[0] for r in rows} == {"LLM first token -25 %", "llm.generation -25 % (the silence's largest segment)"}
    assert (
        "B (local): not asked: network RTT +100 ms: the LLM ran in-process, there is no network on its path; "
        "the LLM of A (cloud): A (cloud) has no measured successful turn here." in doc.text()
    )
