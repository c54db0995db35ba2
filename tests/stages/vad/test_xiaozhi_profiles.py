"""The VAD's end-point profiles: the lab's and xiaozhi-esp32-server's default, and push-to-talk.

Chunk probabilities are scripted (one per 512-sample chunk, in order), so the rule is checked
exactly without a model; one test runs the real Silero model on a packaged fixture.
A 60 ms frame completes one or two 32 ms chunks: chunk k (audio [32k, 32k+32) ms) is complete in
frame ceil((k+1) * 512 / 960) - 1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from types import SimpleNamespace

import pytest

from pipeline.events import FRAME_BYTES, AudioFrame, Event, SpeechEnd, SpeechStart, StageInfo, XiaozhiServerProfile
from pipeline.settings.audio import load_audio
from pipeline.settings.config import Config, ConfigError, VadConfig, load_config
from stages.catalog import registry
from stages.registry import TurnInputs
from stages.vad.endpointer import FrameVad
from stages.vad.manual import ManualEndpoint
from stages.vad.silero import SileroClassifier
from stages.vad.xiaozhi import CHUNK_BYTES, XiaozhiServerVad
from tests.harness import run_stage
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
FRAGMENT = ROOT / "configs" / "xiaozhi-server-vad.toml"
LOCAL = ROOT / "configs" / "local.toml"
KEEP_ALL = XiaozhiServerProfile(min_utterance_ms=0)  # no utterance too short, to look at the rule alone


class ScriptedChunks:
    """The k-th chunk's probability is ``probs[k]``; silence after the script."""

    name = "scripted"

    def __init__(self, probs: Sequence[float]) -> None:
        self.probs = list(probs)
        self.calls = 0

    def reset(self) -> None:
        self.calls = 0

    async def chunk_probability(self, pcm: bytes) -> float:
        assert len(pcm) == CHUNK_BYTES
        self.calls += 1
        return self.probs[self.calls - 1] if self.calls <= len(self.probs) else 0.0


def frames(n: int, arrivals: Sequence[int] | None = None) -> list[AudioFrame]:
    return [
        AudioFrame(seq=i, pcm=bytes(FRAME_BYTES), arrival_ms=None if arrivals is None else arrivals[i])
        for i in range(n)
    ]


def xs(probs: Sequence[float], n: int, profile: XiaozhiServerProfile = KEEP_ALL, **kw: object) -> list[Event]:
    return run_stage(XiaozhiServerVad(ScriptedChunks(probs), profile), frames(n, **kw)).events  # type: ignore[arg-type]


def summary(events: list[Event]) -> tuple[list[int], list[int], list[tuple[str, int]]]:
    """(boundary offsets, seqs passed on, (kind, position) of boundaries among the events)."""
    bounds = [e.offset_ms for e in events if isinstance(e, (SpeechStart, SpeechEnd))]
    seqs = [e.seq for e in events if isinstance(e, AudioFrame)]
    where = [(type(e).__name__, i) for i, e in enumerate(events) if isinstance(e, (SpeechStart, SpeechEnd))]
    return bounds, seqs, where


# Chunks 0-2 speech, 3-22 in between (0.4), then silence. The vote says voice up to chunk 24
# (frame 13, which arrives at 780 ms at audio pace); 200 ms later is frame 17 (1020 ms).
HOLD = [0.9] * 3 + [0.4] * 20


# --- the dual threshold -----------------------------------------------------------------------


def test_between_the_thresholds_a_chunk_keeps_the_previous_state() -> None:
    bounds, seqs, _ = summary(xs(HOLD, 30))
    # speech from chunk 0; the 0.4 chunks stay speech, so it ends with chunk 22 (736 ms)
    assert bounds == [0, 736]
    assert seqs == list(range(18))  # end-pointed on frame 17


def test_between_the_thresholds_after_silence_is_silence() -> None:
    assert xs([0.2] * 3 + [0.4] * 20, 30) == []
    assert xs([0.49] * 40, 30) == []


def test_at_the_high_threshold_is_speech_and_at_the_low_one_silence() -> None:
    bounds, _, _ = summary(xs([0.5] * 3 + [0.3] * 20, 30))
    assert bounds == [0, 96]  # 0.3 is silence at once: the last speech chunk is chunk 2


# --- the 3-of-5 vote --------------------------------------------------------------------------


def test_two_speech_chunks_in_five_are_not_speech() -> None:
    assert xs([0.1] * 10 + [0.9, 0.1, 0.9, 0.1, 0.1] * 4, 30) == []


def test_three_speech_chunks_in_five_are_speech_from_the_first_of_them() -> None:
    bounds, seqs, where = summary(xs([0.1] * 10 + [0.9, 0.1, 0.9, 0.1, 0.9], 30))
    # chunk 14 completes the vote in frame 7; its window's first speech chunk is chunk 10 (320 ms);
    # the vote fails from chunk 15 on, and frame 11 (660 ms) is the first 200 ms after frame 7 (420 ms)
    assert bounds == [320, 480]
    assert seqs == list(range(12))
    assert where == [("SpeechStart", 0), ("SpeechEnd", 13)]


def test_the_vote_window_and_count_are_settings() -> None:
    probs = [0.1] * 10 + [0.9, 0.1, 0.9, 0.1, 0.1] * 4
    assert xs(probs, 30, XiaozhiServerProfile(vote_needed=2, min_utterance_ms=0)) != []


# --- silence between arrivals -----------------------------------------------------------------


def test_at_audio_pace_arrival_and_audio_time_agree() -> None:
    on_time = [60 * i for i in range(30)]
    assert summary(xs(HOLD, 30, arrivals=on_time)) == summary(xs(HOLD, 30))


def test_a_stall_ends_the_utterance_on_the_first_frame_after_it() -> None:
    # frames 14-17 are held up by the network and arrive together at 1020 ms
    arrivals = [60 * i for i in range(14)] + [1020, 1020, 1020, 1020] + [60 * i for i in range(18, 30)]
    bounds, seqs, _ = summary(xs(HOLD, 30, arrivals=arrivals))
    assert bounds == [0, 736]
    assert seqs == list(range(15))  # frame 14, three frames (180 ms of audio) before the on-time end-point


def test_frames_arriving_faster_than_audio_time_delay_the_end_point() -> None:
    # frames 13-20 arrive in a burst at 780 ms (sent faster than real time): no 200 ms passes among them
    arrivals = [60 * i for i in range(13)] + [780] * 8 + [60 * i for i in range(21, 30)]
    bounds, seqs, _ = summary(xs(HOLD, 30, arrivals=arrivals))
    assert bounds == [0, 736]
    assert seqs == list(range(22))  # frame 21 (1260 ms) is the first arrival 200 ms after the last speech


def test_a_whole_clip_arriving_at_once_ends_only_with_the_input() -> None:
    bounds, seqs, where = summary(xs(HOLD, 30, arrivals=[0] * 30))
    assert bounds == [0, 736]
    assert seqs == list(range(30))
    assert where[-1] == ("SpeechEnd", 31)


def test_the_silence_is_a_setting() -> None:
    _, seqs, _ = summary(xs(HOLD, 30, XiaozhiServerProfile(silence_ms=400, min_utterance_ms=0)))
    assert seqs == list(range(21))  # frame 20 (1200 ms) is the first 400 ms after frame 13


# --- what is passed on ------------------------------------------------------------------------


def test_the_ten_frames_before_speech_are_passed_on() -> None:
    # chunk 30 (960-992 ms) is the third speech chunk: frame 16 completes it
    bounds, seqs, where = summary(xs([0.1] * 28 + [0.9] * 8, 40, XiaozhiServerProfile()))
    assert bounds == [896, 1152]
    assert seqs[0] == 6 and seqs == list(range(6, seqs[-1] + 1))
    assert where[0] == ("SpeechStart", 0)


def test_the_pre_roll_is_ten_of_the_devices_packets_not_ten_frames() -> None:
    """asr/base.py keeps asr_audio[-10:] of the packets a device sent: 200 ms from a desktop client's 20 ms
    packets, which reach the stage cut into 60 ms frames (the lab kept 600 ms for every client)."""
    probs = [0.1] * 28 + [0.9] * 40  # speech is heard at chunk 30, which frame 16 completes
    twenty = [dataclasses.replace(f, packet_ms=20) for f in frames(60)]
    events = run_stage(XiaozhiServerVad(ScriptedChunks(probs), XiaozhiServerProfile()), twenty).events
    passed = [(e.seq, len(e.pcm) // 32) for e in events if isinstance(e, AudioFrame)]
    assert passed[:5] == [(12, 20), (13, 60), (14, 60), (15, 60), (16, 60)]  # 200 ms before frame 16
    sixty = [e.seq for e in xs(probs, 60, XiaozhiServerProfile()) if isinstance(e, AudioFrame)]
    assert sixty[0] == 6  # the firmware's 60 ms packets: ten of them, 600 ms


def test_an_utterance_of_900_ms_or_less_is_dropped_and_listening_goes_on() -> None:
    blip = [0.1] * 10 + [0.9, 0.1, 0.9, 0.1, 0.9]  # kept whole it is frames 0-11 (720 ms)
    assert xs(blip, 30, XiaozhiServerProfile()) == []
    # After a blip, an utterance: the drop on frame 11 cleared the pre-roll and the half-filled
    # chunk (256 samples), so chunks start again at 720 ms and the 25th is at 720 + 3 * 32 ms.
    probs = [*blip, *[0.1] * 10, *[0.9] * 20]
    bounds, seqs, where = summary(xs(probs, 40, XiaozhiServerProfile()))
    assert bounds == [816, 1456]
    assert seqs == list(range(12, 30))
    assert where[0] == ("SpeechStart", 0)


def test_the_input_ending_before_the_silence_closes_the_utterance() -> None:
    bounds, seqs, where = summary(xs([0.9] * 10, 4, XiaozhiServerProfile()))
    assert bounds == [0, 224]  # short, but the input ended: passed on, not dropped
    assert seqs == [0, 1, 2, 3]
    assert where == [("SpeechStart", 0), ("SpeechEnd", 5)]


def test_the_stage_says_its_profile() -> None:
    info = XiaozhiServerVad(ScriptedChunks([])).info
    assert info.role == "vad"
    assert dict(info.attributes)["vad.profile"] == "xiaozhi-server"
    assert dict(info.attributes)["vad.silence_ms"] == 200
    assert dict(info.attributes)["vad.vote"] == "3/5"


def test_a_bad_profile_is_refused_with_its_reason() -> None:
    with pytest.raises(ValueError, match="threshold_low"):
        XiaozhiServerVad(ScriptedChunks([]), XiaozhiServerProfile(threshold_low=0.6))
    with pytest.raises(ValueError, match="vote_needed"):
        XiaozhiServerVad(ScriptedChunks([]), XiaozhiServerProfile(vote_needed=6))


# --- the setting ------------------------------------------------------------------------------


def build_silero(vad: VadConfig) -> FrameVad | XiaozhiServerVad:
    impl = registry().get("vad", "silero")
    model = SimpleNamespace(session=None, batcher=None)  # building reads no weights; nothing runs here
    stage = impl.build(impl.settings_from(vad), model, TurnInputs(text="", language="en"))
    assert isinstance(stage, (FrameVad, XiaozhiServerVad))
    return stage


def attributes(info: StageInfo) -> dict[str, object]:
    return dict(info.attributes)


def test_the_lab_profile_is_the_default_and_unchanged() -> None:
    stage = build_silero(VadConfig())
    assert isinstance(stage, FrameVad)
    assert (stage.silence_ms, stage.min_speech_ms, stage.threshold) == (600, 120, 0.5)
    assert attributes(stage.info) == {"vad.profile": "lab", "vad.silence_ms": 600, "vad.threshold": 0.5}


def test_the_fragment_selects_the_xiaozhi_server_profile_with_its_defaults() -> None:
    cfg = load_config([LOCAL, FRAGMENT])
    assert cfg.vad.settings.profile == "xiaozhi-server"
    assert cfg.vad.settings.xiaozhi_server == XiaozhiServerProfile()
    assert cfg.asr == Config().asr and cfg.llm == Config().llm  # a fragment: only the VAD changes
    stage = build_silero(cfg.vad)
    assert isinstance(stage, XiaozhiServerVad) and stage.profile == XiaozhiServerProfile()
    assert attributes(stage.info)["vad.profile"] == "xiaozhi-server"


def test_the_profile_and_its_settings_enter_config_id() -> None:
    lab = load_config(LOCAL)
    server = load_config([LOCAL, FRAGMENT])
    slower = load_config([LOCAL, FRAGMENT], {"vad": {"xiaozhi_server": {"silence_ms": 300}}})
    ids = {c.config_id("q") for c in (lab, server, slower)}
    assert len(ids) == 3


def test_bad_profile_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"\[vad\] profile = 'nope': choose one of lab, xiaozhi-server"):
        load_config(None, {"vad": {"profile": "nope"}})
    with pytest.raises(ConfigError, match=r"\[vad.xiaozhi_server\] vote_needed"):
        load_config(None, {"vad": {"profile": "xiaozhi-server", "xiaozhi_server": {"vote_needed": 0}}})
    with pytest.raises(
        ConfigError, match=r"unknown setting\(s\) for impl = 'energy': profile; known: impl, threshold_dbfs"
    ):
        load_config(None, {"vad": {"impl": "energy", "profile": "xiaozhi-server"}})
    with pytest.raises(ConfigError, match="unknown setting"):
        load_config(None, {"vad": {"xiaozhi_server": {"min_speech_ms": 1}}})


# --- push-to-talk -----------------------------------------------------------------------------


def test_manual_mode_passes_everything_from_zero_to_the_end_of_input() -> None:
    events = run_stage(ManualEndpoint(), frames(7)).events
    assert events[0] == SpeechStart(offset_ms=0)
    assert [e.seq for e in events[1:-1] if isinstance(e, AudioFrame)] == list(range(7))
    assert events[-1] == SpeechEnd(offset_ms=420)
    assert len(events) == 9


def test_manual_mode_ignores_silence_and_needs_a_frame() -> None:
    assert run_stage(ManualEndpoint(), []).events == []
    assert ManualEndpoint().info == StageInfo(role="vad", impl="manual", attributes=(("vad.profile", "manual"),))


# --- the real model ---------------------------------------------------------------------------


@pytest.mark.real
def test_on_the_real_model_the_xiaozhi_server_profile_end_points_earlier() -> None:
    from tests import real_models as models

    clip = list(load_audio(models.FIXTURES / "en01.wav").frames)
    lab = run_stage(FrameVad(SileroClassifier(models.silero())), clip).events
    server = run_stage(XiaozhiServerVad(SileroClassifier(models.silero())), clip).events

    def decided_on(events: list[Event]) -> int:  # the frame on which the end-point was decided
        assert isinstance(events[-1], SpeechEnd) and isinstance(events[-2], AudioFrame)
        return events[-2].seq

    # The same speech (start and end within a chunk or two), decided about 300 ms sooner in audio:
    # 600 ms of silence against 200 ms after the vote lets go (here frames 37 and 32).
    assert decided_on(lab) - decided_on(server) >= 4
    assert decided_on(server) < len(clip) - 1  # an end-point, not the end of the clip

    def bounds(events: list[Event]) -> list[int]:
        return [e.offset_ms for e in events if isinstance(e, (SpeechStart, SpeechEnd))]

    assert all(abs(a - b) <= 100 for a, b in zip(bounds(lab), bounds(server), strict=True))
