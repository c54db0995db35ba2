"""A turn's critical path and what-if, checked on the virtual clock, where every latency is scripted.

The paths are derived by hand from the stage settings; a what-if is checked against a second run
with the stage's latency really changed, so the dependency graph must give the same nanoseconds.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest

from pipeline.analysis.path.critical import critical_path, path_row
from pipeline.analysis.path.graph import PathError, TurnGraph
from pipeline.analysis.path.graph_of import graph_of
from pipeline.analysis.retiming import (
    NEIGHBOURS,
    SETTABLE,
    SWAPPED,
    WhatIfError,
    carries_neighbours,
    parse_change,
    partners,
    predict,
    read_graphs,
    swapped,
)
from pipeline.analysis.rows import turn_row
from pipeline.analysis.traces import ReadProblems, read_trace_file, spans_from_traces_data
from pipeline.analysis.turns import TurnSpans, group_turns
from pipeline.clock import VirtualClock, run_on_clock
from pipeline.events import FRAME_MS, LatencyProfile
from pipeline.fleet.scheduled import ScheduledBackend
from pipeline.fleet.scheduler import INTERACTIVE, Scheduler
from pipeline.records.path import (
    ASR,
    ENDPOINTING,
    LLM_FIRST_TOKEN,
    LLM_GENERATION,
    PLAYBACK,
    QUEUE,
    SEGMENTS,
    TOOL,
    TTS,
    TTS_FIRST_FRAME,
)
from pipeline.run.turn import ServerStages, run_turn
from pipeline.tracing import names
from pipeline.tracing.export import Tracing
from pipeline.tracing.spans import Attributes
from pipeline.tracing.timeline import TurnTimeline
from pipeline.whatif import main
from stages.llm import LlmStage
from stages.llm.prompts import ScriptedTools
from stages.llm.scripted import ScriptedReply, scripted_tokens
from stages.tts.stub import speech_duration_ms
from tests.paths import TEST_DATA
from tests.scenario import run_virtual, stages, utterance

MS = 1_000_000
DATA = TEST_DATA
EXPERIMENT = DATA / "report" / "experiment" / "traces"
# the stages' scripted latencies (ms), given explicitly so each expected path can be derived from them
SILENCE_MS, ASR_MS, TTFT_MS, PER_TOKEN_MS, TTS_FIRST_MS, RTF, TOOL_MS = 600, 300, 200, 50, 100, 0.5, 40
SPEECH_END_MS = (10 + 20) * FRAME_MS  # utterance(): 10 silent frames, then 20 of speech
ATTRS: Attributes = {
    names.SCHEMA: names.SCHEMA_VERSION,
    names.RUN_ID: "cp",
    names.QUESTION_ID: "q1",
    names.ROUND: 1,
    names.WARMUP: False,
}
THREE = ScriptedReply("Hi. How are you today? Fine.")
TOOL_REPLY = ScriptedReply("Okay, it is on. Done.", tool_name="set_light")


def server(
    reply: ScriptedReply, /, asr_ms: float = ASR_MS, ttft_ms: float = TTFT_MS, tts_first_ms: float = TTS_FIRST_MS
) -> ServerStages:
    """``tests.scenario.stages`` with this file's latencies; a test changes one and runs again."""
    return stages(
        reply,
        asr_ms=asr_ms,
        ttft_ms=ttft_ms,
        per_token_ms=PER_TOKEN_MS,
        tts_first_ms=tts_first_ms,
        rtf=RTF,
        tools=bool(reply.tool_name),
        silence_ms=SILENCE_MS,
    )


def turn_spans(tl: TurnTimeline, trace: Path) -> TurnSpans:
    """The turn as the analysis reads it: its spans appended to ``trace`` as one line, grouped back."""
    assert tl.ok, tl.error_message
    tracing = Tracing(trace, "test")
    line = tracing.emit_turn(tl, ATTRS)
    tracing.shutdown()
    problems = ReadProblems()
    [turn] = group_turns(spans_from_traces_data(line), problems)
    assert problems.messages == [] and turn.turn.attributes[names.OK] is True
    return turn


def measured(t: TurnSpans) -> tuple[int, int]:
    """(first audible, whole turn) in ns after the end of speech, from the spans themselves."""
    playback, speech_end = t.first(names.PLAYBACK), t.turn.event_ns(names.EV_USER_SPEECH_END)
    assert playback is not None and speech_end is not None
    return playback.start_ns - speech_end, playback.end_ns - speech_end


def steps(graph: TurnGraph, target: int) -> list[tuple[str, int]]:
    return [(s.kind, s.ns) for s in critical_path(graph, target).steps]


def ns(pairs: Sequence[tuple[str, float]]) -> list[tuple[str, int]]:
    return [(kind, round(ms * MS)) for kind, ms in pairs]


def test_the_second_sentences_tts_runs_beside_the_path(tmp_path: Path) -> None:
    s0, s1 = "How are you today, my dear friend?", "Fine."
    t = turn_spans(run_virtual(server(ScriptedReply(f"{s0} {s1}"))), tmp_path / "t.jsonl")
    g = graph_of(t)
    n0, n1 = len(scripted_tokens(s0)), len(scripted_tokens(s1))
    frames0, frames1 = speech_duration_ms(s0) // FRAME_MS, speech_duration_ms(s1) // FRAME_MS
    # the splitter cuts sentence 0 when the next sentence's first token shows what follows its "?"
    # (ms after the first token; sentence 1, the last, is cut at the call's end: its last token)
    cut0, cut1 = n0 * PER_TOKEN_MS, (n0 + n1 - 1) * PER_TOKEN_MS
    tts0_done = cut0 + TTS_FIRST_MS + (frames0 - 1) * FRAME_MS * RTF  # one synthesiser: sentence 1 waits
    tts1_done = max(cut1, tts0_done) + TTS_FIRST_MS + (frames1 - 1) * FRAME_MS * RTF
    assert tts1_done < cut0 + TTS_FIRST_MS + speech_duration_ms(s0)  # synthesised while sentence 0 plays
    silence = [
        (ENDPOINTING, SILENCE_MS),
        (ASR, ASR_MS),
        (LLM_FIRST_TOKEN, TTFT_MS),
        (LLM_GENERATION, n0 * PER_TOKEN_MS),
        (TTS_FIRST_FRAME, TTS_FIRST_MS),
    ]
    assert steps(g, g.first_audible) == ns(silence)
    path = critical_path(g, g.first_audible)
    assert path.steps[-1].label == "sentence 0 first frame"
    assert not [s.label for s in path.steps if "sentence 1" in s.label]
    assert path.slack_ns == dict(ns([(LLM_GENERATION, (n1 - 1) * PER_TOKEN_MS)]))  # sentence 1's tokens
    whole = critical_path(g, g.last_played)
    assert steps(g, g.last_played) == ns([*silence, (PLAYBACK, speech_duration_ms(s0)), (PLAYBACK, frames1 * FRAME_MS)])
    assert [s.label for s in whole.steps if "sentence 1" in s.label] == ["sentence 1 played"]
    assert whole.slack_ns == dict(
        ns(
            [
                (LLM_GENERATION, (n1 - 1) * PER_TOKEN_MS),
                (TTS_FIRST_FRAME, TTS_FIRST_MS),  # sentence 1's, beside sentence 0's audio
                (TTS, (frames0 - 1 + frames1 - 1) * FRAME_MS * RTF),
            ]
        )
    )
    assert whole.total_ns == sum(s.ns for s in whole.steps) == measured(t)[1]


def test_a_tool_call_is_on_the_path_between_the_two_calls(tmp_path: Path) -> None:
    reply = ScriptedReply("Okay, it is on.", tool_name="set_light")
    g = graph_of(turn_spans(run_virtual(server(reply)), tmp_path / "t.jsonl"))
    path = critical_path(g, g.first_audible)
    # the second call's one sentence is cut at the call's end, at its last token
    expected = [
        (ENDPOINTING, "end-point", SILENCE_MS),
        (ASR, "transcript", ASR_MS),
        (LLM_FIRST_TOKEN, "call 0 first token", TTFT_MS),
        (TOOL, "tool set_light", TOOL_MS),
        (LLM_FIRST_TOKEN, "call 1 first token", TTFT_MS),
        (LLM_GENERATION, "sentence 0 cut", (len(scripted_tokens(reply.text)) - 1) * PER_TOKEN_MS),
        (TTS_FIRST_FRAME, "sentence 0 first frame", TTS_FIRST_MS),
    ]
    assert [(s.kind, s.label, s.ns) for s in path.steps] == [(k, label, v * MS) for k, label, v in expected]
    slower = server(reply)
    assert isinstance(slower.llm, LlmStage)
    slower.llm.executor = ScriptedTools(LatencyProfile(TOOL_MS + 100))
    again = measured(turn_spans(run_virtual(slower), tmp_path / "t.jsonl"))
    p = predict(g, [parse_change("tool=+100ms")])
    assert (p.audible_ns, p.whole_ns) == again


def queued_turn(hold_ms: int) -> TurnTimeline:
    """A turn whose LLM call waits for the shared model, held by another caller for ``hold_ms``."""
    clock = VirtualClock()
    scheduler = Scheduler(clock, 1)
    stage = server(ScriptedReply("Hi."))
    assert isinstance(stage.llm, LlmStage)
    stage.llm.backend = ScheduledBackend(stage.llm.backend, scheduler, INTERACTIVE)

    async def scenario() -> TurnTimeline:
        async def hold() -> None:
            grant = await scheduler.acquire(INTERACTIVE)
            await asyncio.sleep(hold_ms / 1000)
            scheduler.release(grant)

        holder = asyncio.create_task(hold())
        tl = await run_turn(utterance(lead_frames=10, speech_frames=20), stage, clock)
        await holder
        return tl

    return run_on_clock(scenario(), clock)


def test_a_queue_wait_is_on_the_path(tmp_path: Path) -> None:
    hold_ms = 2800
    g = graph_of(turn_spans(queued_turn(hold_ms), tmp_path / "t.jsonl"))
    request_ms = SPEECH_END_MS + SILENCE_MS + ASR_MS  # the call asks for the model here
    assert steps(g, g.first_audible) == ns(
        [
            (ENDPOINTING, SILENCE_MS),
            (ASR, ASR_MS),
            (QUEUE, hold_ms - request_ms),
            (LLM_FIRST_TOKEN, TTFT_MS),
            (LLM_GENERATION, PER_TOKEN_MS),  # "Hi." is two tokens: cut at the second, the call's end
            (TTS_FIRST_FRAME, TTS_FIRST_MS),
        ]
    )
    again = measured(turn_spans(queued_turn(hold_ms + 50), tmp_path / "t.jsonl"))
    p = predict(g, [parse_change("queue=+50ms")])
    assert (p.audible_ns, p.whole_ns) == again


FIXTURES = sorted(DATA.rglob("*.jsonl"))


@pytest.mark.parametrize("trace", FIXTURES, ids=[str(f.relative_to(DATA)) for f in FIXTURES])
def test_every_committed_turns_paths_add_up_to_its_measured_times(trace: Path) -> None:
    problems = ReadProblems()
    turns = group_turns(read_trace_file(trace, problems), problems)
    assert turns and problems.messages == []
    for t in turns:
        if t.turn.attributes.get(names.OK) is not True:
            with pytest.raises(PathError, match="failed"):
                graph_of(t)
            continue
        g = graph_of(t)
        audible_ns, whole_ns = measured(t)
        silence, whole = critical_path(g, g.first_audible), critical_path(g, g.last_played)
        assert (silence.total_ns, whole.total_ns) == (audible_ns, whole_ns), g.turn
        assert sum(s.ns for s in silence.steps) == audible_ns and sum(s.ns for s in whole.steps) == whole_ns
        row, _ = turn_row(t)
        assert row.first_audio_ms == round(audible_ns / MS, 3), g.turn
        paths = path_row(g)
        assert (paths.silence_ms, paths.whole_ms) == (audible_ns / MS, whole_ns / MS)
        by_kind = silence.by_kind()
        assert [getattr(paths, f"silence_{kind}_ms") for kind in SEGMENTS] == [by_kind[k] / MS for k in SEGMENTS]
        p = predict(g)  # no change: every measured time back, to the nanosecond
        assert (p.audible_ns, p.whole_ns) == (audible_ns, whole_ns)


@pytest.mark.parametrize("files", [FIXTURES, *([f] for f in FIXTURES)], ids=["all", *(f.name for f in FIXTURES)])
def test_graphs_read_through_the_one_reader_are_those_of_every_span_grouped_at_once(files: list[Path]) -> None:
    # the way pipeline.whatif read before it read through read.read_traces: every span in one process,
    # grouped, warm-up and failures told from the turn span's attributes; the same graphs, counts and problems
    problems = ReadProblems()
    turns = group_turns([s for f in files for s in read_trace_file(f, problems)], problems)
    graphs, warmup, failed = [], 0, []
    for t in turns:
        a = t.turn.attributes
        if a.get(names.WARMUP) is True:
            warmup += 1
        elif a.get(names.OK) is not True:
            failed.append(str(a.get(names.QUESTION_ID) or "?"))
        else:
            graphs.append(graph_of(t))
    read = read_graphs(files)
    assert (read.graphs, read.warmup, read.failed, read.problems) == (graphs, warmup, failed, problems.messages)


@pytest.mark.parametrize("reply", [THREE, TOOL_REPLY], ids=["three sentences", "tool"])
@pytest.mark.parametrize(
    ("latency", "segment"), [("asr_ms", "asr"), ("ttft_ms", "llm.first_token"), ("tts_first_ms", "tts.first_frame")]
)
@pytest.mark.parametrize("delta", [137, -37])
def test_what_if_matches_a_run_with_the_stage_really_changed(
    tmp_path: Path, reply: ScriptedReply, latency: str, segment: str, delta: int
) -> None:
    g = graph_of(turn_spans(run_virtual(server(reply)), tmp_path / "t.jsonl"))
    base = {"asr_ms": ASR_MS, "ttft_ms": TTFT_MS, "tts_first_ms": TTS_FIRST_MS}[latency]
    again = measured(turn_spans(run_virtual(server(reply, **{latency: base + delta})), tmp_path / "t.jsonl"))
    p = predict(g, [parse_change(f"{segment}={delta:+d}ms")])
    assert (p.audible_ns, p.whole_ns) == again
    assert (p.measured_audible_ns, p.measured_whole_ns) != again


def whatif(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def virtual_trace(tmp_path: Path) -> Path:
    trace = tmp_path / "v.jsonl"
    turn_spans(run_virtual(server(THREE)), trace)
    return trace


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ("nope=1ms", f"unknown segment 'nope'; known: {', '.join(SETTABLE)}"),
        ("playback=+1ms", "playback cannot be changed: it is the answer's own audio"),
        ("llm.first_token=5ms", "the change must be signed, with a unit"),
        ("llm.generation=+5ms", "llm.generation it is scaled (+N%)"),
        ("network.rtt=+5%", "a round trip is added or taken away in ms, not scaled"),
        ("network.rtt=+5ms", "turn cp q1 round 1's LLM ran in-process: there is no network on its path"),
        ("asr=-301ms", "turn cp q1 round 1's transcript took 300.000 ms; it cannot become shorter than nothing"),
    ],
)
def test_changes_the_traces_cannot_answer_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str, says: str
) -> None:
    code, out, err = whatif(capsys, virtual_trace(tmp_path), "--set", change)
    assert (code, out) == (2, "") and says in err, err


def test_a_successful_turn_without_tts_spans_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines, cut = [], ""
    for line in (EXPERIMENT / "a1.jsonl").read_text().splitlines():
        data = json.loads(line)
        turns = group_turns(spans_from_traces_data(data), ReadProblems())
        a = turns[0].turn.attributes if turns else {}
        if not cut and a.get(names.OK) is True and a.get(names.WARMUP) is False:
            cut = graph_of(turns[0]).turn
            for rs in data["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    ss["spans"] = [s for s in ss["spans"] if s["name"] != names.TTS]
        lines.append(json.dumps(data))
    (tmp_path / "cut.jsonl").write_text("\n".join(lines) + "\n")
    code, out, err = whatif(capsys, tmp_path / "cut.jsonl")
    assert (code, out) == (2, "") and cut and f"{cut}: no tts span" in err, err
    with pytest.raises(WhatIfError, match=re.escape(f"{cut}: no tts span")):
        read_graphs([tmp_path / "cut.jsonl"])


def test_a_swap_needs_the_same_questions_and_answers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = whatif(capsys, EXPERIMENT / "b1.jsonl", "--swap", f"llm={EXPERIMENT / 'a1.jsonl'}")
    assert (code, err) == (0, "") and "predicted from measured traces" in out and "the LLM of" in out
    # d1 asked zh01 and en01; renamed, its en01 is asked by neither set
    renamed = tmp_path / "d1.jsonl"
    renamed.write_text((DATA / "report" / "drift" / "traces" / "d1.jsonl").read_text().replace('"en01"', '"en09"'))
    code, out, err = whatif(capsys, renamed, "--swap", f"llm={EXPERIMENT / 'b1.jsonl'}")
    assert (code, out) == (2, "")
    assert "only in the traces: en09; only in the other traces: en01, zh02" in err, err
    a1 = read_graphs([EXPERIMENT / "a1.jsonl"]).graphs
    assert [predict(g, (), o) == predict(g) for g, o in zip(a1, partners(a1, a1), strict=True)] == [True] * len(a1)
    one = graph_of(turn_spans(run_virtual(server(THREE)), tmp_path / "t.jsonl"))
    other = graph_of(turn_spans(run_virtual(server(ScriptedReply("Hi. How is it going? Fine."))), tmp_path / "t.jsonl"))
    tool = graph_of(turn_spans(run_virtual(server(TOOL_REPLY)), tmp_path / "t.jsonl"))
    with pytest.raises(
        WhatIfError, match=r"differently \(3 vs 3 sentence\(s\); 'How are you today\?' vs 'How is it going\?'"
    ):
        swapped(one, other)
    with pytest.raises(WhatIfError, match=r"made 1 LLM call\(s\), turn cp q1 round 1 2"):
        swapped(one, tool)


def test_missing_traces_and_failed_turns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = whatif(capsys, tmp_path / "nowhere")
    assert (code, out) == (2, "") and "nowhere: not found" in err
    code, out, err = whatif(capsys, DATA / "report" / "failed" / "traces")
    assert code == 2 and "no measured successful turn to re-time" in err and "failed turn(s) have no path" in err
    code, out, err = whatif(capsys, EXPERIMENT / "bp1.jsonl", "--paths-csv", tmp_path / "p.csv")
    assert code == 0 and "1 failed turn(s) have no path" in out
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 1 + len(read_graphs([EXPERIMENT / "bp1.jsonl"]).graphs)


def test_a_device_buffer_change_moves_each_sentences_wait_for_its_first_frame(tmp_path: Path) -> None:
    # the device buffer is the lag from a sentence's first frame to its audio starting: a change lengthens that
    # wait (where the audio waited on its frame) and nothing else
    [t] = group_turns(read_trace_file(virtual_trace(tmp_path), ReadProblems()), ReadProblems())
    graph = graph_of(t)
    measured_audible, measured_whole = measured(t)
    first = predict(graph, [parse_change("device_buffer=+20ms")])
    assert first.audible_ns == measured_audible + 20_000_000
    assert predict(graph, [parse_change("device_buffer=+20%")]).audible_ns == measured_audible  # 0 ms, scaled
    assert first.whole_ns >= measured_whole


def test_a_devices_turn_needs_its_servers_spans() -> None:
    # a device's turn over a transport: its stages ran on the server, so without the server's turn there is
    # no path (tests/transport/test_device_server_e2e.py checks the joined path against a real websocket run)
    [t, *_] = [t for t in group_turns(read_trace_file(EXPERIMENT / "b1.jsonl", ReadProblems()), ReadProblems())
               if t.turn.attributes.get(names.OK) is True]  # fmt: skip
    device = msgspec.structs.replace(t.turn, name=names.DEVICE, span_id="d0", parent_span_id=t.turn.span_id)
    with pytest.raises(PathError, match="a device's view without its server's spans"):
        graph_of(TurnSpans(t.turn, [*t.children, device]))


def test_a_swap_to_where_the_llm_ran_elsewhere_brings_its_neighbours_segments(tmp_path: Path) -> None:
    """The TTS runs while the LLM generates, and an in-process LLM shares the CPU with it (measured: B's
    first TTS frame later than A's, interleaved): a swap from a run whose LLM ran elsewhere brings the
    TTS segments too, and nothing else but the LLM's."""
    one = graph_of(turn_spans(run_virtual(server(THREE)), tmp_path / "t.jsonl"))
    later = tuple(msgspec.structs.replace(p, duration_ns=p.duration_ns + 1000) for p in one.points)
    remote = msgspec.structs.replace(one, remote_llm=True, points=later)
    local = msgspec.structs.replace(remote, remote_llm=False)
    assert not one.remote_llm and carries_neighbours(one, remote) and not carries_neighbours(one, local)
    kinds = {p.kind for p in one.points}
    assert kinds >= SWAPPED | NEIGHBOURS
    for other, moved in ((remote, SWAPPED | NEIGHBOURS), (local, SWAPPED)):
        got = {p.label: p.duration_ns - q.duration_ns for p, q in zip(swapped(one, other), one.points, strict=True)}
        assert got == {p.label: 1000 if p.kind in moved else 0 for p in one.points}
