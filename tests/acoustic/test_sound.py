"""Sound through a real sound server: a private PulseAudio daemon, a null sink, its monitor as the microphone
(ALSA's ``pulse`` device, pointed at them by the fixture's PULSE_SINK and PULSE_SOURCE).

What a ``Speaker`` lane plays at a stream time is found in the ``Recorder``'s recording at that
stream time (the stream's own time info), and two lanes written for times half a second apart are
heard that far apart, to the sample.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.acoustic.sound import Recorder, SoundError, Speaker
from pipeline.acoustic.sound_server import PulseServer, SoundServerError
from tests.sound_server import pulse, sound_missing

pytestmark = [pytest.mark.sound, pytest.mark.realtime]
__all__ = ["pulse"]  # the fixture, used by name

RATE = 16000


def onsets(x: np.ndarray, threshold: float = 0.25, gap: int = 1600) -> list[int]:
    """Where each burst above ``threshold`` starts (bursts at least ``gap`` samples apart)."""
    idx = np.flatnonzero(np.abs(x) > threshold)
    return [int(i) for k, i in enumerate(idx) if k == 0 or i - idx[k - 1] > gap]


def test_the_daemon_offers_the_sink_and_its_monitor(pulse: PulseServer) -> None:
    listed = subprocess.run(["pactl", "list", "short", "sources"], capture_output=True, text=True, check=True)
    assert pulse.monitor in listed.stdout
    assert pulse.env["PULSE_SERVER"] == f"unix:{pulse.socket}"


def test_a_click_is_recorded_where_it_was_scheduled(pulse: PulseServer) -> None:
    click = np.full(16, 0.5, np.float32)
    with Recorder("pulse") as rec, Speaker("pulse") as speaker:
        lane = speaker.lane("click")
        starts = [lane.write(click, at=speaker.now() + 0.3 * k) for k in range(5)]
        while speaker.now() < starts[-1] + 0.3:
            time.sleep(0.05)
        found = onsets(rec.samples())
        heard = [rec.adc_time(i) for i in found]
    assert speaker.late == 0 and len(found) == 5
    # the sound server adds nothing PortAudio's time info does not say (measured here: 0-2 ms)
    assert max(abs(h - s) for h, s in zip(heard, starts, strict=True)) < 0.005


def test_two_lanes_keep_their_distance_to_the_sample(pulse: PulseServer) -> None:
    tone = (0.5 * np.sin(np.arange(800) * 2 * np.pi * 440 / RATE)).astype(np.float32)
    with Recorder("pulse") as rec, Speaker("pulse") as speaker:
        voice, answer = speaker.lane("voice"), speaker.lane("speaker")
        t = speaker.now()
        voice.write(tone, at=t)
        answer.write(tone, at=t + 0.5)
        while speaker.now() < t + speaker.delay_s + 0.7:
            time.sleep(0.05)
        found = onsets(rec.samples(), threshold=0.01)
    assert speaker.late == 0 and len(found) == 2
    assert abs(found[1] - found[0] - 0.5 * RATE) <= 1


def test_an_unknown_device_is_named_in_the_error(pulse: PulseServer) -> None:
    with pytest.raises(SoundError, match="no-such-speaker"):
        Speaker("no-such-speaker")


def test_a_daemon_that_cannot_start_says_why(tmp_path: Path) -> None:
    if sound_missing():
        pytest.skip(f"no sound server: {sound_missing()}")
    server = PulseServer(tmp_path, sink="bad name with spaces")
    with pytest.raises(SoundServerError, match="pulseaudio did not start"):
        server.start(timeout_s=5)
    assert server.process is None
