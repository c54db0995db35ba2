"""Audio is never lost without an error: espeak gets its text on stdin and its exit status is checked,
and a sentence whose TTS yields no audio, or far too little for its text, fails the turn by name."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import AsyncIterator

import pytest

from pipeline.clock import RealClock
from pipeline.events import AudioOut, Event, Sentence, StageInfo
from stages.llm.scripted import ScriptedReply
from stages.tts.espeak import EspeakError, EspeakTts
from tests.harness import run_stage
from tests.scenario import run_virtual, stages


def speak(tts: EspeakTts, texts: list[str]) -> list[AudioOut]:
    """espeak-ng is a real process, so on the real clock."""
    return run_stage(tts, [Sentence(i, text, 0, 0) for i, text in enumerate(texts)], RealClock()).of(AudioOut)


def test_a_sentence_that_looks_like_options_is_spoken_not_obeyed(tmp_path: object) -> None:
    out = speak(EspeakTts(), ["-w /tmp/lab-espeak-probe.wav hello there", "--help"])
    assert {a.sentence_index for a in out} == {0, 1}
    assert sum(a.duration_ms for a in out if a.sentence_index == 0) >= 600


@pytest.mark.parametrize("text", ["hello", "hello " * 40_000])
def test_a_failing_espeak_is_an_error_with_its_status(text: str) -> None:
    """The long text outgrows the pipe's buffer, so the child is always gone before it is all written."""
    tts = EspeakTts()
    tts.binary = shutil.which("false") or "/bin/false"  # exits 1 without a word: espeak-ng itself exits 0 too often
    with pytest.raises(EspeakError, match="espeak-ng exited with status 1"):
        speak(tts, [text])


class SilentTts:
    """Yields ``frames`` frames for every sentence (0: none at all)."""

    def __init__(self, frames: int) -> None:
        self.frames = frames
        self.info = StageInfo(role="tts", impl="silent")

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for event in events:
            if isinstance(event, Sentence):
                for seq in range(self.frames if event.index else 1):  # the first sentence always speaks
                    yield AudioOut(sentence_index=event.index, seq=seq, pcm=bytes(1920))


@pytest.mark.parametrize(("frames", "error"), [(0, "tts_no_audio"), (1, "tts_short_audio")])
def test_a_sentence_without_its_audio_fails_the_turn_by_name(frames: int, error: str) -> None:
    server = dataclasses.replace(
        stages(ScriptedReply("Fine. The weather tomorrow is sunny and warm all day long.")), tts=SilentTts(frames)
    )
    tl = run_virtual(server)
    assert tl.error_type == error
    assert "sentence 1" in tl.error_message
