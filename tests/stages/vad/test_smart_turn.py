"""Smart Turn v3.2 stacked on a VAD (``[vad] impl = "smart-turn"``): its settings, missing packages named, the audio
it hands the model, its features against Pipecat's, the real model on the fixtures (whole questions, a question cut
in the middle, a question with a pause inside it) and a replay chosen by a config file alone, its verdicts on the
trace.

What the real model says here was measured first (docs/reference/stages.md); the tests assert those verdicts with
probabilities far from the threshold, not what it might say.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import cast

import numpy as np
import pytest

from pipeline.analysis.traces import ReadProblems, read_trace_file
from pipeline.clock import RealClock
from pipeline.events import (
    FRAME_BYTES,
    VERDICT_FINISHED,
    VERDICT_MAX_SILENCE,
    VERDICT_WAIT,
    AudioFrame,
    Event,
    SpeechEnd,
    SpeechStart,
    VadDecision,
)
from pipeline.replay import main
from pipeline.settings.audio import load_audio
from pipeline.settings.config import ConfigError, load_config
from pipeline.settings.models import CacheModels, ModelError, resolve
from pipeline.tracing import names
from stages.catalog import registry
from stages.registry import TurnInputs
from stages.vad.endpointer import FrameVad
from stages.vad.smart_turn import SmartTurnJudge, SmartTurnModel, SmartTurnSettings
from tests import real_models as models
from tests.harness import run_stage
from tests.paths import REPO_ROOT

CONFIGS = REPO_ROOT / "configs"
SILENCE = AudioFrame(seq=0, pcm=bytes(FRAME_BYTES))


def loaded(**table: object) -> tuple[SmartTurnSettings, object, str]:
    """The registered implementation's settings, what it loads once per run, and its identity."""
    impl = registry().get("vad", "smart-turn")
    settings = impl.settings_of(table)
    assert impl.load is not None
    got = impl.load(settings, CacheModels(models.CACHE))
    return settings, got.engine, got.identity


def smart_turn(**table: object) -> FrameVad:
    settings, engine, _ = loaded(**table)
    stage = registry().get("vad", "smart-turn").build(settings, engine, TurnInputs("", "en"))
    assert isinstance(stage, FrameVad)
    return stage


def clip(name: str) -> list[AudioFrame]:
    return list(load_audio(models.FIXTURES / name).frames)


def renumbered(frames: list[AudioFrame]) -> list[AudioFrame]:
    return [AudioFrame(seq=i, pcm=f.pcm) for i, f in enumerate(frames)]


def decisions(events: list[Event]) -> list[VadDecision]:
    return [e for e in events if isinstance(e, VadDecision)]


# --- settings and packages --------------------------------------------------------------------


def test_its_settings_are_its_own_and_checked() -> None:
    cfg = load_config([CONFIGS / "simulator.toml", CONFIGS / "smart-turn.toml"])
    assert cfg.vad.impl == "smart-turn" and cfg.vad.settings == SmartTurnSettings()
    for table, message in (
        ({"inner": "fsmn"}, r"\[vad\] inner = 'fsmn': choose one of silero, ten, energy"),
        ({"max_silence_ms": 200}, r"max_silence_ms = 200: must be longer than inner_silence_ms = 200"),
        ({"threshold": 1.0}, r"threshold = 1\.0: a probability between 0 and 1"),
        ({"pre_speech_ms": -1}, r"pre_speech_ms = -1: must be >= 0"),
        ({"silence_ms": 600}, r"unknown setting\(s\) for impl = 'smart-turn': silence_ms"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_config(None, {"vad": {"impl": "smart-turn", **table}})


@pytest.mark.parametrize(
    ("module", "message"),
    [
        ("onnxruntime", r"needs onnxruntime: pip install 'voice-latency-lab\[smartturn\]'"),
        ("faster_whisper", r"needs faster-whisper: pip install 'voice-latency-lab\[smartturn\]'"),
        ("pipecat", r"needs the pipecat-ai wheel, which holds its model: pip install --no-deps pipecat-ai==1\.14\.0"),
    ],
)
def test_a_missing_package_names_the_package_to_install(
    module: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # found by no import: as if it were not installed
    with pytest.raises(ValueError, match=message):
        loaded()


def test_the_model_registry_names_the_wheel_by_its_pip_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pipecat", None)
    with pytest.raises(ModelError, match="needs the package pipecat-ai: pip install --no-deps pipecat-ai"):
        resolve("smart-turn-v3.2", tmp_path)


# --- what the model hears ---------------------------------------------------------------------


class Heard:
    """A stand-in for the model that writes down the audio it is handed."""

    name = "stand-in.onnx"

    def __init__(self) -> None:
        self.thread = ThreadPoolExecutor(1)
        self.pcm: list[bytes] = []

    def probability(self, pcm: bytes) -> tuple[float, int]:
        self.pcm.append(pcm)
        return 0.2, 1000


def test_the_model_hears_the_turn_from_its_pre_speech_audio_on_and_at_most_the_last_8_s() -> None:
    model = Heard()
    judge = SmartTurnJudge(cast(SmartTurnModel, model), SmartTurnSettings())
    samples = np.arange(20 * 16000, dtype=np.int64) % 30000  # 20 s whose every sample says where it is
    for start in range(0, samples.size, 960):
        judge.hear(samples[start : start + 960].astype("<i2").tobytes())
    decision = asyncio.run(judge.judge(speech_start_ms=19_000, speech_end_ms=19_700, at_ms=20_000))
    assert decision == VadDecision(VERDICT_WAIT, 20_000, 19_700, probability=0.2, cpu_ns=1000)
    heard = np.frombuffer(model.pcm[-1], dtype="<i2")
    assert heard.size == 1500 * 16 and heard[0] == samples[18_500 * 16] % 30000  # from 500 ms before the speech
    asyncio.run(judge.judge(speech_start_ms=2_000, speech_end_ms=19_700, at_ms=20_000))
    assert len(model.pcm[-1]) // 2 >= 8 * 16000  # a long turn: the last 8 s at least (the model keeps 8 s of it)


def pipecat_features(audio: np.ndarray) -> np.ndarray:
    """Pipecat 1.14.0's own features (its vendored copy of transformers' extractor), from the installed wheel's file
    alone: importing ``pipecat`` would need its dependencies."""
    base = resolve("smart-turn-v3.2", models.CACHE).parent.parent  # .../pipecat/audio/turn/smart_turn
    spec = importlib.util.spec_from_file_location("pipecat_whisper_features", base / "_whisper_features.py")
    assert spec is not None and spec.loader is not None
    module = ModuleType(spec.name)
    spec.loader.exec_module(module)
    features: np.ndarray = module.compute_whisper_log_mel_features(audio, do_normalize=True)
    return features


def window(name: str) -> np.ndarray:
    """A fixture as the model hears it: 8 s, zeros in front."""
    pcm = b"".join(f.pcm for f in clip(name))
    audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    return np.pad(audio, (8 * 16000 - audio.size, 0))


@pytest.mark.real  # the pipecat-ai wheel is a model package
@pytest.mark.parametrize("name", ["en01.wav", "zh02.wav"])
def test_faster_whisper_gives_pipecats_features(name: str) -> None:
    audio = window(name)
    ours = SmartTurnModel(resolve("smart-turn-v3.2", models.CACHE)).features(audio)
    theirs = pipecat_features(audio)
    assert ours.shape == theirs.shape == (80, 800) and ours.dtype == np.float32
    assert np.abs(ours - theirs).max() < 1e-4  # measured: 3e-6 (float32 against float64 arithmetic)


@pytest.mark.real
def test_faster_whisper_gives_transformers_features() -> None:
    transformers = pytest.importorskip("transformers")  # installed with funasr (the `all` extra)
    audio = window("en01.wav")
    extractor = transformers.WhisperFeatureExtractor(chunk_length=8)
    theirs = extractor(
        audio,
        sampling_rate=16000,
        padding="max_length",
        max_length=8 * 16000,
        truncation=True,
        do_normalize=True,
        return_tensors="np",
    ).input_features[0]
    ours = SmartTurnModel(resolve("smart-turn-v3.2", models.CACHE)).features(audio)
    assert np.abs(ours - theirs).max() < 1e-4  # measured: 1.2e-5


# --- the real model on the fixtures -----------------------------------------------------------


@pytest.mark.real
def test_it_loads_from_the_wheel_with_its_inner_vad_and_says_what_it_is() -> None:
    _, _, identity = loaded()
    assert identity == "smart-turn-v3.2@2bb026316b14; silero-vad@1a153a22f450"
    info = smart_turn(inner="ten").info
    assert info.impl == "smart-turn"
    assert dict(info.attributes) == {
        "vad.inner": "ten",
        "vad.silence_ms": 200,
        "vad.threshold": 0.5,
        "vad.turn_model": "smart-turn-v3.2-cpu.onnx",
        "vad.turn_threshold": 0.5,
        "vad.max_silence_ms": 3000,
        "vad.pre_speech_ms": 500,
    }


@pytest.mark.real
@pytest.mark.parametrize("name", ["en01.wav", "zh02.wav"])
@pytest.mark.parametrize("inner", ["silero", "ten"])
def test_a_whole_question_is_finished_at_its_first_pause(name: str, inner: str) -> None:
    frames = clip(name)
    events = run_stage(smart_turn(inner=inner), frames, RealClock()).events
    [start] = [e for e in events if isinstance(e, SpeechStart)]
    [end] = [e for e in events if isinstance(e, SpeechEnd)]
    [finished] = decisions(events)
    assert finished.verdict == VERDICT_FINISHED and finished.speech_end_ms == end.offset_ms
    assert finished.probability is not None and finished.probability > 0.7  # measured: 0.87 to 0.94
    assert start.offset_ms + 500 <= end.offset_ms <= len(frames) * 60 - 1000  # measured: 1680 (en01), 3000 (zh02)
    # asked once the inner VAD's 200 ms pause was heard, on a 60 ms frame's edge: the end-point is declared there
    assert 200 <= finished.at_ms - end.offset_ms < 260
    assert finished.cpu_ns is not None and 1_000_000 < finished.cpu_ns < 1_000_000_000  # measured: 25-45 ms


@pytest.mark.real
@pytest.mark.parametrize("name", ["en12.wav", "zh12.wav"])
def test_a_question_cut_in_the_middle_is_waited_for_until_the_pause_reaches_its_limit(name: str) -> None:
    frames = clip(name)
    cut = renumbered(frames[: len(frames) // 2] + [SILENCE] * 60)  # the first half, then 3.6 s of silence
    events = run_stage(smart_turn(), cut, RealClock()).events
    wait, limit = decisions(events)
    [end] = [e for e in events if isinstance(e, SpeechEnd)]
    assert wait.verdict == VERDICT_WAIT and wait.probability is not None and wait.probability < 0.3  # measured: 0.06
    assert limit.verdict == VERDICT_MAX_SILENCE and limit.probability is None and limit.cpu_ns is None
    assert wait.speech_end_ms == limit.speech_end_ms == end.offset_ms
    assert 3000 <= limit.at_ms - end.offset_ms < 3060  # max_silence_ms after the speech ended


@pytest.mark.real
def test_speech_that_resumes_after_a_wait_continues_the_same_utterance() -> None:
    frames = clip("zh13.wav")
    half = len(frames) // 2
    paused = renumbered(frames[:half] + [SILENCE] * 10 + frames[half:])  # a 600 ms pause in the middle
    events = run_stage(smart_turn(), paused, RealClock()).events
    assert [type(e) for e in events if not isinstance(e, AudioFrame)] == [
        SpeechStart,
        VadDecision,
        VadDecision,
        SpeechEnd,
    ]
    wait, finished = decisions(events)
    assert (wait.verdict, finished.verdict) == (VERDICT_WAIT, VERDICT_FINISHED)  # measured: 0.03, then 0.73
    [end] = [e for e in events if isinstance(e, SpeechEnd)]
    assert wait.speech_end_ms < wait.at_ms < finished.speech_end_ms == end.offset_ms
    passed = [e.seq for e in events if isinstance(e, AudioFrame)]
    assert passed == list(range(passed[0], passed[-1] + 1))  # every frame of the utterance, the pause included


@pytest.mark.real
@pytest.mark.realtime  # the simulator's scripted stages take their time on the real clock
def test_a_replay_chosen_by_config_alone_records_each_verdict_on_the_vad_span(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    args = ["--config", str(CONFIGS / "simulator.toml"), "--config", str(CONFIGS / "smart-turn.toml")]
    args += ["--limit", "2", "--rounds", "1", "--fast", "--quiet", "--out", str(out), "--run-id", "st"]
    assert main([str(models.FIXTURES), *args], env={}) == 0, capsys.readouterr().err
    vads = [s for s in read_trace_file(out / "traces" / "st.jsonl", ReadProblems()) if s.name == names.VAD]
    assert len(vads) == 2
    for vad in vads:
        assert (vad.attributes[names.STAGE_IMPL], vad.attributes["lab.vad.inner"]) == ("smart-turn", "silero")
        [decision] = [e.attributes for e in vad.events if e.name == names.EV_VAD_DECISION]
        assert decision[names.DECISION_VERDICT] == VERDICT_FINISHED  # the first two fixtures: whole questions
        probability, cpu = decision[names.DECISION_PROBABILITY], decision[names.DECISION_CPU_MS]
        assert isinstance(probability, float) and probability > 0.5
        assert isinstance(cpu, float) and 1 < cpu < 1000
