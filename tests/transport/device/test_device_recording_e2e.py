"""``pipeline.replay --server ... --record-audio DIR`` against ``pipeline.serve`` (its own process), over
WebSocket and MQTT + UDP: each device's recording holds what its traces say, to the sample, on both
channels."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from pipeline import replay
from pipeline.analysis.recording_marks import check_recording, read_recording
from pipeline.analysis.traces import ReadProblems, read_trace_file, trace_files
from pipeline.events import FRAME_MS, FRAME_SAMPLES
from pipeline.records.bench_csv import read_bench_csv
from pipeline.settings.audio import load_audio
from pipeline.settings.fixtures import load_questions
from tests.transport.test_device_server_e2e import FIXTURES, SIMULATOR, start_server, stop

pytestmark = pytest.mark.transport


KEY = {"LAB_MQTT_KEY": "Lab-signature-Key9"}


@pytest.mark.parametrize(("transport", "mode"), [("websocket", "auto"), ("websocket", "realtime"), ("mqtt", "auto")])
def test_a_replay_records_each_device_where_its_traces_put_every_turn(
    tmp_path: Path, transport: str, mode: str
) -> None:
    out, rec = tmp_path / "dev", tmp_path / "rec"
    mqtt = ["--mqtt-port", "0", "--mqtt-signature-key-env", "LAB_MQTT_KEY"] if transport == "mqtt" else []
    server, url = start_server(tmp_path / "server", *mqtt, env=KEY)
    env: dict[str, str] = {}
    try:
        if mqtt:
            assert server.stdout is not None
            said = re.search(r"serving (mqtt://\S+) with audio on udp://", server.stdout.readline())
            assert said is not None
            url, env = said.group(1), {"MQTT_SIGNATURE_KEY": KEY["LAB_MQTT_KEY"]}
        args = [str(FIXTURES), "--config", str(SIMULATOR), "--limit", "2", "--rounds", "1", "--quiet"]
        args += ["--server", url, "--listen-mode", mode, "--out", str(out), "--run-id", "rec1"]
        assert replay.main([*args, "--record-audio", str(rec)], env=env) == 0
    finally:
        stop(server)
    rows = read_bench_csv(out / "bench.csv")
    assert [r.ok for r in rows] == [1, 1]
    assert [r.turn_temperature for r in rows] == ["cold_connection", "warm"]
    assert all(r.last_audible_ms and r.first_audible_ms and r.last_audible_ms > r.first_audible_ms for r in rows)
    assert sorted(p.name for p in rec.iterdir()) == ["0.json", "0.wav"]
    assert json.loads((rec / "0.json").read_text())["run_id"] == "rec1"
    problems = ReadProblems()
    spans = [s for f in trace_files(out / "traces") for s in read_trace_file(f, problems)]
    found = check_recording(rec / "0.wav", rec / "0.json", spans)
    samples = read_recording(rec / "0.wav")
    assert [f.marks.question_id for f in found] == [r.question_id for r in rows]
    for f, row in zip(found, rows, strict=True):
        # the speaker: the first sample above |x| > 64 after the end of speech is the traces' first audible, and
        # the last one's end the traces' last audible, to the sample
        assert (f.first_off, f.last_off) == (0, 0), f
        m = f.marks
        assert m.speech_end is not None and m.first_audible is not None and m.last_audible is not None
        # and the rows' figures are the recording's, but for the rounding of each moment to its sample
        assert (m.first_audible - m.speech_end) / 16 == pytest.approx(row.first_audible_ms, abs=1 / 16)
        assert (m.last_audible - m.speech_end) / 16 == pytest.approx(row.last_audible_ms, abs=1 / 16)
        # the microphone: the clip, frame for frame, where the traces' end of speech puts it
        assert m.clip_start is not None and m.speech_end_ms is not None
        question = next(q for q in load_questions(FIXTURES, "").questions if q.id == m.question_id)
        frames = load_audio(question.audio).frames
        k = (m.speech_end_ms - 1) // FRAME_MS  # the frame holding the end of speech, and the whole clip around it
        start = m.speech_end - (m.speech_end_ms - k * FRAME_MS) * 16 - k * FRAME_SAMPLES
        clip = np.frombuffer(b"".join(fr.pcm for fr in frames), dtype="<i2")
        assert np.array_equal(samples[start : start + len(clip), 0], clip)
        if mode == "realtime":  # its microphone streams on: the noise floor follows the clip, never digital zero
            after = samples[start + len(clip) : start + len(clip) + FRAME_SAMPLES, 0].astype(np.float64)
            assert 20 < np.sqrt(np.mean(after**2)) < 50  # -60 dBFS is 32.8 RMS
