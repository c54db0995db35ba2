"""The emulated device's sound outputs without a sound card: what it hands to them, and what it refuses.

``DeviceSound`` is given a stand-in for ``pipeline.acoustic.sound.Speaker``; the real one is tested
through a PulseAudio null sink (tests/acoustic/test_sound.py, tests/acoustic/test_sound_e2e.py).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from pipeline import replay
from pipeline.acoustic import sound
from pipeline.events import FRAME_SAMPLES, AudioFrame, AudioOut
from pipeline.transport.device.device_settings import DeviceSettings, SoundOutputs
from pipeline.transport.device.link import DeviceError
from pipeline.transport.device.speaker import DeviceSound
from tests.transport.test_device_server_e2e import FIXTURES


class FakeLane:
    def __init__(self, name: str) -> None:
        self.name = name
        self.written: list[np.ndarray] = []

    def write(self, pcm: Any, at: float | None = None) -> float:
        self.written.append(np.asarray(pcm))
        return 0.0


class FakeSpeaker:
    opened: ClassVar[list[FakeSpeaker]] = []

    def __init__(self, device: str) -> None:
        if device == "missing":
            raise sound.SoundError("output device 'missing' could not be opened")
        self.device, self.closed, self.late = device, False, 0
        self.lanes: list[FakeLane] = []
        FakeSpeaker.opened.append(self)

    def start(self) -> FakeSpeaker:
        return self

    def lane(self, name: str) -> FakeLane:
        self.lanes.append(FakeLane(name))
        return self.lanes[-1]

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_speaker(monkeypatch: pytest.MonkeyPatch) -> type[FakeSpeaker]:
    FakeSpeaker.opened = []
    monkeypatch.setattr(sound, "Speaker", FakeSpeaker)
    return FakeSpeaker


def pcm(value: int) -> bytes:
    return np.full(FRAME_SAMPLES, value, "<i2").tobytes()


def test_the_question_is_said_whole_and_each_answer_frame_as_it_plays(fake_speaker: type[FakeSpeaker]) -> None:
    out = DeviceSound(SoundOutputs(speaker="room", voice="room"), "dev1")
    assert len(fake_speaker.opened) == 1  # one output: one stream, so the two keep their distance
    out.question([AudioFrame(0, pcm(1000)), AudioFrame(1, pcm(2000))])
    out.answer(AudioOut(sentence_index=0, seq=1, pcm=pcm(-3000)))
    voice, speaker = out.voice_lane, out.answer_lane
    assert isinstance(voice, FakeLane) and isinstance(speaker, FakeLane)
    assert [len(w) for w in voice.written] == [2 * FRAME_SAMPLES]
    assert voice.written[0][0] == pytest.approx(1000 / 32768) and voice.written[0][-1] == pytest.approx(2000 / 32768)
    assert [w[0] for w in speaker.written] == [pytest.approx(-3000 / 32768)]
    out.close()
    assert fake_speaker.opened[0].closed


def test_two_outputs_are_two_streams_and_none_is_silence(fake_speaker: type[FakeSpeaker]) -> None:
    out = DeviceSound(SoundOutputs(speaker="desk", voice="mouth"), "dev1")
    assert sorted(s.device for s in fake_speaker.opened) == ["desk", "mouth"]
    quiet = DeviceSound(SoundOutputs(speaker="desk"), "dev2")
    quiet.question([AudioFrame(0, pcm(1))])  # no voice: nothing said
    assert quiet.voice_lane is None
    out.close()
    quiet.close()


def test_an_output_that_cannot_open_is_a_device_error_naming_it(fake_speaker: type[FakeSpeaker]) -> None:
    with pytest.raises(DeviceError, match="dev1: output device 'missing'"):
        DeviceSound(SoundOutputs(speaker="desk", voice="missing"), "dev1")
    assert all(s.closed for s in fake_speaker.opened)


def test_a_voice_needs_a_mode_that_sends_the_clip() -> None:
    with pytest.raises(ValueError, match="realtime"):
        DeviceSettings(url="ws://127.0.0.1:1/", listen_mode="realtime", sound=SoundOutputs(voice="room"))
    assert not SoundOutputs() and SoundOutputs(speaker="x")


def test_speaker_and_voice_need_a_server(capsys: pytest.CaptureFixture[str]) -> None:
    assert replay.main([str(FIXTURES), "--speaker", "room", "--limit", "1"], env={}) == 2
    assert "--speaker and --voice are a device's: they need --server" in capsys.readouterr().err
