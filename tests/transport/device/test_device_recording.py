"""The emulated device's recording (``--record-audio``) and its sample-exact figures, checked against its traces.

The recorder alone is driven with known moments and read back sample for sample; a device turn's
end of speech and first and last audible sample are checked on the virtual clock to the nanosecond;
then a device against a scripted server records two turns, and on its recording the speaker's
first and last sample above the threshold lie exactly where its traces say, and the clip's frame
that holds the end of speech lies exactly where the traces put the end of speech.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from pipeline import replay
from pipeline.analysis.recording_marks import (
    MarksError,
    audible_between,
    check_recording,
    read_recording,
    read_sidecar,
)
from pipeline.analysis.traces import ReadSpan, spans_from_traces_data
from pipeline.clock import VIRTUAL_EPOCH_NS, VirtualClock, run_on_clock
from pipeline.events import FRAME_SAMPLES, AudioFrame, AudioOut
from pipeline.run.device_side import Ask, close
from pipeline.tracing import names
from pipeline.tracing.export import Tracing
from pipeline.tracing.timeline import TurnTimeline
from pipeline.transport.device.device import EmulatedDevice
from pipeline.transport.device.device_recording import HOLD_S, NS_PER_SAMPLE, AudioRecording, RecordTo, sample_of
from pipeline.transport.device.device_settings import DeviceSettings
from pipeline.transport.device.device_turn import DeviceTurn, TurnHost
from pipeline.transport.device.pacer import captured_ns
from pipeline.transport.device.speaker import DeviceSound
from pipeline.transport.device.uplink_packets import NoiseLoop
from tests.transport.device.test_device_firmware import CLIP, CLOCK, SPEECH_END_MS, answer_each, ask, scripted, settings
from tests.transport.server.test_websocket import real
from tests.transport.test_device_server_e2e import FIXTURES, SIMULATOR

MS = 1_000_000


def pcm(*loud: tuple[int, int], n: int = FRAME_SAMPLES) -> bytes:
    """A frame of silence with the given (index, value) samples."""
    samples = np.zeros(n, dtype="<i2")
    for index, value in loud:
        samples[index] = value
    return samples.tobytes()


def test_a_moment_and_its_sample_convert_exactly_and_additively() -> None:
    t0 = 1_000_000_000
    assert NS_PER_SAMPLE == 62_500
    assert sample_of(t0, t0) == 0 and sample_of(t0 + 31_249, t0) == 0 and sample_of(t0 + 31_250, t0) == 1
    assert all(sample_of(t0 + 31_250 + k * NS_PER_SAMPLE, t0) == 1 + k for k in range(2000))


def test_the_recorder_puts_each_frame_at_its_moment_and_writes_long_runs_as_it_goes(tmp_path: Path) -> None:
    t0 = VIRTUAL_EPOCH_NS
    rec = AudioRecording(RecordTo(tmp_path, "0", "run1"), t0)
    seconds = int(HOLD_S) + 8  # far past what is held in memory: written to disk on the way
    expected = np.zeros((seconds * 16000 + 16000, 2), dtype=np.int16)
    for k in range(seconds * 1000 // 60):
        frame = np.full(FRAME_SAMPLES, k + 1, dtype="<i2")
        sent = t0 + (k + 1) * 60 * MS + 7 * NS_PER_SAMPLE  # handed on 7 samples after the frame's end
        rec.microphone(frame.tobytes(), sent)
        expected[k * FRAME_SAMPLES + 7 : (k + 1) * FRAME_SAMPLES + 7, 0] = k + 1
        if k % 3 == 0:  # every third frame also played, starting 100 samples into that frame's capture
            rec.speaker(frame.tobytes(), t0 + k * 60 * MS + 100 * NS_PER_SAMPLE)
            expected[k * FRAME_SAMPLES + 100 : (k + 1) * FRAME_SAMPLES + 100, 1] = k + 1
    assert len(rec._buf) < 5 * 16000  # a few seconds held, whatever the length of the run
    end = t0 + (seconds + 1) * 1000 * MS
    rec.close(end)
    got = read_recording(rec.wav_path)
    assert got.shape == (sample_of(end, t0), 2)
    assert np.array_equal(got, expected[: len(got)])
    sidecar = json.loads(rec.json_path.read_text())
    assert sidecar == {
        "device": "0",
        "run_id": "run1",
        "sample_rate": 16000,
        "t0_ns": t0,
        "channels": ["microphone", "speaker"],
    }
    assert read_sidecar(rec.json_path).t0_ns == t0


def test_a_write_later_than_what_is_held_is_cut_and_counted(tmp_path: Path) -> None:
    rec = AudioRecording(RecordTo(tmp_path, "3", "r"), 0)
    for k in range(int(HOLD_S * 1000 / 60) + 40):
        rec.microphone(pcm(), (k + 1) * 60 * MS)
    rec.speaker(pcm((0, 500)), 0)  # the very first frame's moment, long written
    rec.close(0)
    assert rec.late_samples == FRAME_SAMPLES
    assert json.loads(rec.json_path.read_text())["late_samples"] == FRAME_SAMPLES


def test_a_bad_sidecar_or_recording_is_refused_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "0.json"
    bad.write_text('{"device": "0"}')
    with pytest.raises(MarksError, match=r"0\.json.*t0_ns"):
        read_sidecar(bad)
    wav = tmp_path / "0.wav"
    wav.write_bytes(b"not a wav")
    with pytest.raises(MarksError, match=r"0\.wav: not a readable recording"):
        read_recording(wav)


class _Link:
    transport = "websocket"


class _Host:
    """Just enough of a device for one turn's microphone and speaker, without a connection."""

    def __init__(self, recording: AudioRecording | None = None) -> None:
        self.settings = DeviceSettings(url="ws://127.0.0.1:1/xiaozhi/v1/")
        self.clock = VirtualClock()
        self.link = _Link()
        self.mic = None
        self.noise = NoiseLoop("test", "firmware")
        self.recording = recording
        self.sound: DeviceSound | None = None  # no sound device here (tests/transport/device/test_speaker.py has one)
        self.session_id = "s"
        self.realtime = False


def _turn(host: _Host, speech_end_ms: int | None) -> DeviceTurn:
    frames = [AudioFrame(seq=i, pcm=pcm()) for i in range(20)]
    return DeviceTurn(cast(TurnHost, host), Ask(frames, speech_end_ms, "q", 1, ""))


@pytest.mark.parametrize(("speech_end_ms", "frame", "before_due_ms"), [(750, 12, 30), (780, 12, 0), (None, 19, 0)])
def test_the_end_of_speech_is_when_the_microphone_captured_it(
    speech_end_ms: int | None, frame: int, before_due_ms: int
) -> None:
    """Frame k is captured in the 60 ms before its due time (here each is sent 3 ms after it); the speech
    ends ``speech_end_ms - 60 k`` into it (no speech found: at the clip's end). Before, it was the send
    itself: up to 60 ms later, and the send's lateness more."""

    async def scenario() -> TurnTimeline:
        turn = _turn(_Host(), speech_end_ms)
        for k in range(20):
            due = 5_000 * MS + k * 60 * MS
            turn.sent(turn.frames[k], due + 3 * MS, captured_ns(due + 3 * MS, 3.0))
        return turn.recorder.timeline

    tl = run_on_clock(scenario(), VirtualClock())
    assert tl.device is not None and tl.device.speech_end_frame == frame
    assert tl.device.last_uplink_ns == 5_000 * MS + 19 * 60 * MS + 3 * MS  # the sends stay the sends
    assert tl.vad.user_speech_end_ns == 5_000 * MS + frame * 60 * MS - before_due_ms * MS
    assert tl.vad.speech_end_offset_ms == speech_end_ms


def test_first_and_last_audible_are_samples_and_the_speaker_records_each_frame_where_it_played(
    tmp_path: Path,
) -> None:
    """Four frames played back to back from t = 0: silent; loud at samples 100 and 900; one sample of
    65 at 5; silent. First audible: 60 ms + 100 samples; last: 120 ms + 6 samples (one past sample 5).
    Before, first audible was the frame's start (60 ms), and there was no last."""
    frames = [pcm(), pcm((100, 1000), (900, -200)), pcm((5, 65), (6, 64), (7, -64)), pcm()]

    async def scenario() -> tuple[TurnTimeline, AudioRecording]:
        recording = AudioRecording(RecordTo(tmp_path, "0", "r"), VIRTUAL_EPOCH_NS)
        turn = _turn(_Host(recording), 780)
        for i, each in enumerate(frames):
            turn.playout.put_nowait(AudioOut(sentence_index=0, seq=i + 1, pcm=each))
        close(turn.playout)
        await turn.play()
        recording.close(turn.clock.now_ns())
        return turn.recorder.timeline, recording

    tl, recording = run_on_clock(scenario(), VirtualClock())
    assert tl.device is not None
    assert tl.device.first_audible_ns == VIRTUAL_EPOCH_NS + 60 * MS + 100 * NS_PER_SAMPLE
    assert tl.device.last_audible_ns == VIRTUAL_EPOCH_NS + 120 * MS + 6 * NS_PER_SAMPLE
    assert tl.playback.first_start_ns == VIRTUAL_EPOCH_NS and tl.playback.last_end_ns == VIRTUAL_EPOCH_NS + 240 * MS
    right = read_recording(recording.wav_path)[:, 1]
    assert np.array_equal(right, np.frombuffer(b"".join(frames), dtype="<i2"))
    assert audible_between(right, 0, len(right)) == (960 + 100, 1920 + 6)


def _holds(channel: np.ndarray, at: int, frame: bytes) -> bool:
    """``channel`` holds ``frame`` from sample ``at``, sample for sample."""
    want = np.frombuffer(frame, dtype="<i2")
    return bool(np.array_equal(channel[at : at + len(want)], want))


def _spans(timelines: list[TurnTimeline], tmp: Path, run_id: str) -> list[ReadSpan]:
    tracing = Tracing(tmp / "t.jsonl", "test", None)
    spans: list[ReadSpan] = []
    for n, tl in enumerate(timelines):
        attrs: dict[str, Any] = {names.SCHEMA: "1", names.RUN_ID: run_id, names.QUESTION_ID: f"q{n + 1}"}
        spans += spans_from_traces_data(tracing.emit_turn(tl, {**attrs, names.ROUND: 1}))
    tracing.shutdown()
    return spans


@pytest.mark.transport
def test_a_device_records_two_turns_exactly_where_its_traces_put_them(tmp_path: Path) -> None:
    async def scenario() -> list[TurnTimeline]:
        async with scripted(lambda conn: answer_each(conn, 2, frames=6)) as (url, _conns):
            to = RecordTo(tmp_path / "rec", "0", "run1")
            async with EmulatedDevice(settings(url), CLOCK, to) as device:
                return [await device.turn(ask("q1")), await device.turn(ask("q2"))]

    timelines = real(scenario)
    assert all(tl.ok for tl in timelines), [tl.error_message for tl in timelines]
    wav, sidecar = tmp_path / "rec" / "0.wav", tmp_path / "rec" / "0.json"
    found = check_recording(wav, sidecar, _spans(timelines, tmp_path, "run1"))
    assert [f.marks.question_id for f in found] == ["q1", "q2"]
    samples = read_recording(wav)
    for f, tl in zip(found, timelines, strict=True):
        # the speaker: the first and the last sample above |x| > 64 after the end of speech, to the sample
        assert (f.first_off, f.last_off) == (0, 0), f
        # the microphone: the frame holding the end of speech (the tone's last, captured in the 60 ms
        # before its due time) ends exactly at the traced end of speech; the clip's first frame where it was
        # captured, by the first send less its lateness
        end = f.marks.speech_end
        assert end is not None and f.marks.speech_end_ms == SPEECH_END_MS
        assert _holds(samples[:, 0], end - FRAME_SAMPLES, CLIP[3].pcm)
        assert tl.device is not None and tl.device.first_uplink_ns is not None
        assert _holds(samples[:, 0], end - 4 * FRAME_SAMPLES, CLIP[0].pcm)  # the frames are contiguous
        assert tl.device.temperature == ("cold_connection" if f.marks.question_id == "q1" else "warm")


def test_record_audio_without_a_device_is_refused_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [str(FIXTURES), "--config", str(SIMULATOR), "--limit", "1", "--rounds", "1", "--quiet"]
    assert replay.main([*args, "--out", str(tmp_path), "--record-audio", str(tmp_path / "rec")], env={}) == 2
    assert "--record-audio records emulated devices: it needs --server" in capsys.readouterr().err
    assert not (tmp_path / "rec").exists()
