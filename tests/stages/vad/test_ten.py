"""TEN VAD (``[vad] impl = "ten"``): its settings, a missing package named, the real library on the fixtures, and a
replay chosen by a config file alone with its end-point decision on the trace.

The fixtures have about 0.5 s of silence before the speech and 1.2 s or more after it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pipeline.analysis.traces import ReadProblems, read_trace_file
from pipeline.clock import RealClock
from pipeline.events import VERDICT_END, SpeechEnd, SpeechStart, VadDecision
from pipeline.replay import main
from pipeline.settings.audio import load_audio
from pipeline.settings.config import ConfigError, load_config
from pipeline.settings.models import CacheModels
from pipeline.tracing import names
from stages.catalog import registry
from stages.registry import TurnInputs
from stages.vad.endpointer import FrameVad
from stages.vad.ten import TenSettings
from tests import real_models as models
from tests.harness import run_stage
from tests.paths import REPO_ROOT

CONFIGS = REPO_ROOT / "configs"


def ten(**table: object) -> FrameVad:
    """The registered implementation, loaded and built as a run does."""
    impl = registry().get("vad", "ten")
    settings = impl.settings_of(table)
    assert impl.load is not None
    loaded = impl.load(settings, CacheModels(models.CACHE))
    stage = impl.build(settings, loaded.engine, TurnInputs("", "en"))
    assert isinstance(stage, FrameVad)
    return stage


def test_its_settings_are_its_own_and_checked() -> None:
    cfg = load_config([CONFIGS / "simulator.toml", CONFIGS / "ten-vad.toml"])
    assert cfg.vad.impl == "ten" and cfg.vad.settings == TenSettings()
    with pytest.raises(ConfigError, match=r"\[vad\] hop = 100: TEN VAD takes hops of 160 or 256 samples"):
        load_config(None, {"vad": {"impl": "ten", "hop": 100}})
    with pytest.raises(ConfigError, match=r"threshold = 1\.5"):
        load_config(None, {"vad": {"impl": "ten", "threshold": 1.5}})
    with pytest.raises(ConfigError, match="unknown setting"):
        load_config(None, {"vad": {"impl": "ten", "threshold_dbfs": -40}})


def test_a_missing_package_names_the_package_and_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ten_vad", None)  # its import fails as if it were not installed
    impl = registry().get("vad", "ten")
    assert impl.load is not None
    with pytest.raises(ValueError, match=r"needs the ten-vad package: pip install 'voice-latency-lab\[ten\]'"):
        impl.load(TenSettings(), CacheModels(models.CACHE))


@pytest.mark.real
@pytest.mark.parametrize("clip", ["en01.wav", "zh02.wav"])
def test_it_finds_the_one_utterance_and_records_its_end_point_with_its_cpu(clip: str) -> None:
    audio = load_audio(models.FIXTURES / clip)
    events = run_stage(ten(), list(audio.frames), RealClock()).events
    [start] = [e for e in events if isinstance(e, SpeechStart)]
    [end] = [e for e in events if isinstance(e, SpeechEnd)]
    [decision] = [e for e in events if isinstance(e, VadDecision)]
    assert 300 <= start.offset_ms <= 1200  # measured: 480 (en01), 960 (zh02)
    assert start.offset_ms + 500 <= end.offset_ms <= audio.duration_ms - 1000  # measured: 1680, 3000
    assert events.index(decision) == events.index(end) - 1
    assert decision.verdict == VERDICT_END and decision.speech_end_ms == end.offset_ms
    # decided once silence_ms (600) of audio had passed since the speech ended, on a 60 ms frame's edge
    assert 600 <= decision.at_ms - end.offset_ms < 660
    assert decision.frames == decision.at_ms // 60  # every frame up to the decision was classified
    # its CPU, counted by its own thread's CPU clock: about 0.25 ms a frame here; bounded loosely
    assert decision.cpu_ns is not None and 0 < decision.cpu_ns < decision.frames * 5_000_000


@pytest.mark.real
@pytest.mark.realtime  # the simulator's scripted stages take their time on the real clock
def test_a_replay_chosen_by_config_alone_records_the_end_point_on_the_vad_span(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    args = ["--config", str(CONFIGS / "simulator.toml"), "--config", str(CONFIGS / "ten-vad.toml")]
    args += ["--limit", "2", "--rounds", "1", "--fast", "--quiet", "--out", str(out), "--run-id", "ten"]
    assert main([str(models.FIXTURES), *args], env={}) == 0, capsys.readouterr().err
    vads = [s for s in read_trace_file(out / "traces" / "ten.jsonl", ReadProblems()) if s.name == names.VAD]
    assert len(vads) == 2
    for vad in vads:
        assert vad.attributes[names.STAGE_IMPL] == "ten"
        [decision] = [e.attributes for e in vad.events if e.name == names.EV_VAD_DECISION]
        assert decision[names.DECISION_VERDICT] == VERDICT_END
        assert decision[names.SPEECH_END_MS] == vad.attributes[names.SPEECH_END_MS]
        cpu, frames = decision[names.DECISION_CPU_MS], decision[names.DECISION_FRAMES]
        assert isinstance(cpu, float) and isinstance(frames, int) and 0 < cpu < frames * 5
