"""``pipeline.replay --server twilio+ws://...``: a run's device is a phone call to a bot on Twilio's wire (a
stand-in that answers as a Pipecat bot's serializer sends), each question a row with the device's silence and
whole turn, its answer's edges labelled inferred, in the rows and in the report."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline import replay
from pipeline.acoustic.measure import measure_recording
from pipeline.acoustic.questions import load_questions as acoustic_questions
from pipeline.analysis.read import read_traces
from pipeline.analysis.recording_marks import check_recording
from pipeline.analysis.traces import ReadProblems, read_trace_file, trace_files
from pipeline.capacity.__main__ import main as capacity_main
from pipeline.clock import RealClock
from pipeline.records.bench_csv import read_bench_csv
from pipeline.records.ramp_result import read
from pipeline.report.__main__ import main as report_main
from pipeline.report.acoustic_match import match
from pipeline.settings.config import load_config
from pipeline.tracing import names
from tests.transport.device.frames_bot import ANSWER_MS as FRAMES_ANSWER_MS
from tests.transport.device.frames_bot import SAID, FramesStandIn
from tests.transport.device.twilio_bot import ANSWER_MS, THINK_S, Bot, StandIn, bot_in_thread
from tests.transport.test_device_server_e2e import FIXTURES, SIMULATOR

pytestmark = pytest.mark.transport


def _replay(out: Path, url: str, *extra: str) -> int:
    args = [str(FIXTURES), "--config", str(SIMULATOR), "--limit", "1", "--rounds", "2", "--quiet"]
    return replay.main([*args, "--server", url, "--out", str(out), "--run-id", "call1", *extra], env={})


def test_a_replay_calls_a_twilio_bot_and_writes_a_device_row_per_question(tmp_path: Path) -> None:
    bot = StandIn(RealClock())
    with bot_in_thread(bot) as port:
        assert _replay(tmp_path / "out", f"twilio+ws://127.0.0.1:{port}/media") == 0
    rows = read_bench_csv(tmp_path / "out" / "bench.csv")
    assert [r.ok for r in rows] == [1, 1]
    assert {(r.transport, r.answer_edges) for r in rows} == {("twilio", "inferred")}
    assert [r.turn_temperature for r in rows] == ["cold_connection", "warm"]  # one call, both questions on it
    for row in rows:
        assert row.first_audible_ms is not None and row.last_audible_ms is not None
        # the silence holds the stand-in's thinking time (and its wait for quiet, by its own loudness rule)
        assert row.first_audible_ms >= THINK_S * 1000
        # sent at once, played back to back: the answer lasts exactly its length, first sample to the last's end
        assert row.last_audible_ms - row.first_audible_ms == pytest.approx(ANSWER_MS, abs=1e-3)
        assert row.whole_turn_ms == pytest.approx(row.last_audible_ms, abs=1e-3)
        assert row.stt_received_ms is None  # the wire carries no transcript: nothing pretends it did
    assert bot.marks == ["answer-1", "answer-2"] and bot.side.dropped == {} and bot.side.ended
    problems = ReadProblems()
    spans = [s for f in trace_files(tmp_path / "out" / "traces") for s in read_trace_file(f, problems)]
    device = [s for s in spans if s.name == names.DEVICE]
    assert [s.attributes[names.ANSWER_EDGES] for s in device] == ["inferred", "inferred"]
    # the report says under its result table that these figures were inferred, and from how many turns
    assert report_main([str(tmp_path / "out"), "--out", str(tmp_path / "r"), "--no-plots"]) in (0, 1)
    md = (tmp_path / "r" / "report.md").read_text(encoding="utf-8")
    assert "Inferred, not told: the silence and whole turn of" in md and "(1 of 1 turns)" in md


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--barge-in-after", "500"], "a caller cannot use a barge-in"),
        (["--listen-mode", "manual"], "listen mode manual"),
        (["--jitter-frames", "2"], "a jitter buffer (jitter_frames)"),
    ],
)
def test_what_a_phone_line_has_no_part_for_is_refused_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], said: str
) -> None:
    assert _replay(tmp_path / "out", "twilio+ws://127.0.0.1:9/media", *extra) != 0
    assert said in capsys.readouterr().err
    assert not (tmp_path / "out" / "bench.csv").exists()


def test_a_twilio_bot_ramped_step_by_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bot = StandIn(RealClock())
    with bot_in_thread(bot) as port:
        code = capacity_main(
            [
                *(str(FIXTURES), "--config", str(SIMULATOR), "--server", f"twilio+ws://127.0.0.1:{port}/media"),
                *("--out", str(tmp_path / "ramp"), "--steps", "1,2", "--hold", "3s", "--min-turns", "1"),
                *("--think", "0.2s", "--ramp", "0.5s", "--ids", "en10", "--server-pid", str(os.getpid())),
                *("--label", "stand-in bot", "--listen-mode", "auto"),
            ],
            env={},
        )
    assert code == 0, capsys.readouterr().err
    found = read(tmp_path / "ramp" / "capacity.json")
    assert found.transport == "twilio" and [s.devices for s in found.steps] == [1, 2]
    for s in found.steps:
        assert s.verdict == "holds" and s.turns >= 1 and s.silence_ms.p50 is not None
        assert s.failures == {"no_answer": 0, "cut_connection": 0, "refused": 0, "other": 0}
        assert s.server_cpu_pct is not None and s.server_rss_mb is not None
        assert s.lateness_p99_ms is not None  # the line's sends are paced and their lateness recorded, as a device's


def test_a_replay_calls_a_bot_on_pipecats_wire_and_keeps_its_marks_beside_what_was_heard(tmp_path: Path) -> None:
    bot = FramesStandIn(RealClock())
    with bot_in_thread(bot) as port:
        assert _replay(tmp_path / "out", f"pipecat+ws://127.0.0.1:{port}/ws") == 0
    assert bot.ready == ["client-ready"] and bot.rates == {16000}  # Pipecat's client: ready, then 16 kHz audio
    rows = read_bench_csv(tmp_path / "out" / "bench.csv")
    assert [(r.ok, r.transport, r.answer_edges) for r in rows] == [(1, "pipecat", "inferred")] * 2
    for row in rows:
        assert row.first_audible_ms is not None and row.last_audible_ms is not None
        # 24 kHz, sent at once, played back to back: the answer lasts exactly its length
        assert row.last_audible_ms - row.first_audible_ms == pytest.approx(FRAMES_ANSWER_MS, abs=1e-3)
        # the bot's final transcription is the turn's stt, told before it answered
        assert row.stt_received_ms is not None and 0 < row.stt_received_ms < row.first_audible_ms
    problems = ReadProblems()
    spans = [s for f in trace_files(tmp_path / "out" / "traces") for s in read_trace_file(f, problems)]
    device = sorted((s for s in spans if s.name == names.DEVICE), key=lambda s: s.start_ns)
    for n, span in enumerate(device, 1):
        marks = [str(e.attributes[names.BOT_MARK]) for e in span.events if e.name == names.EV_BOT_MARK]
        assert marks == [*SAID, "bot-stopped-speaking"]  # no audio level, no transcription not final
        texts = [e.attributes.get(names.BOT_TEXT) for e in span.events if e.name == names.EV_BOT_MARK]
        assert texts[1] == f"question {n}" and texts[3] == f"answer {n}"
        assert span.attributes[names.TRANSCRIPT] == f"question {n}"


@pytest.mark.parametrize("wire", ["twilio", "pipecat"])
def test_a_recorded_call_holds_what_its_traces_say_and_its_sound_measures_the_same_silence(
    tmp_path: Path, wire: str
) -> None:
    bot: Bot = StandIn(RealClock()) if wire == "twilio" else FramesStandIn(RealClock())
    rec = tmp_path / "rec"
    with bot_in_thread(bot) as port:
        assert _replay(tmp_path / "out", f"{wire}+ws://127.0.0.1:{port}/media", "--record-audio", str(rec)) == 0
    rows = read_bench_csv(tmp_path / "out" / "bench.csv")
    assert [r.ok for r in rows] == [1, 1]
    problems = ReadProblems()
    spans = [s for f in trace_files(tmp_path / "out" / "traces") for s in read_trace_file(f, problems)]
    # the speaker channel: the first sample above the threshold after the end of speech is the traces' first
    # audible, the last one's end their last audible, to the sample
    found = check_recording(rec / "0.wav", rec / "0.json", spans)
    assert [(f.first_off, f.last_off) for f in found] == [(0, 0), (0, 0)], found
    # and the acoustic measurement, from the sound alone, finds each turn's silence within 5 ms of the traces'
    measured = measure_recording(rec / "0.wav", acoustic_questions(FIXTURES, load_config([SIMULATOR])))
    matches, unmatched = match(read_traces(trace_files(tmp_path / "out" / "traces"), workers=1).rows, measured)
    assert len(matches) == 2 and not unmatched, unmatched
    print(f"{wire}: acoustic - trace silence (ms): {[m.difference_ms for m in matches]} ({matches[0].compared})")
    assert all(m.difference_ms is not None and abs(m.difference_ms) <= 5 for m in matches), [
        m.difference_ms for m in matches
    ]
