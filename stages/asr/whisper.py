"""faster-whisper ASR: the utterance the VAD passed is transcribed once the end-point comes.

Whisper is not streaming: it always encodes a 30 s window. Temperature 0
(the fallback ladder took 10-20 s on garbage, docs/reference/stack.md), the language from the
manifest, and for Chinese an initial prompt in Simplified Chinese.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.events import StageInfo
from stages.asr.utterance import UtteranceAsr, UtteranceEngine
from stages.registry import Implementation, Loaded, Models, TurnInputs, load_file, require_positive

WHISPER_LANGUAGES = ("zh", "en")  # what the fixtures and prompts here cover; Whisper knows many more
ZH_PROMPT = "以下是普通话的句子。"


class WhisperEngine(UtteranceEngine):
    """One loaded Whisper model."""

    def __init__(self, model_dir: Path, threads: int = 2, beam_size: int = 1) -> None:
        from faster_whisper import WhisperModel

        if not (model_dir / "model.bin").is_file():
            raise ValueError(f"{model_dir}: no model.bin, not a CTranslate2 Whisper model folder")
        try:
            self._model: Any = WhisperModel(str(model_dir), device="cpu", compute_type="int8", cpu_threads=threads)
        except Exception as exc:  # CTranslate2 raises RuntimeError and others for bad files
            raise ValueError(f"{model_dir}: cannot load Whisper model ({exc})") from None
        super().__init__(model_dir.name)
        self.beam_size = beam_size

    def decode(self, audio: np.ndarray, language: str) -> tuple[str, str]:
        segments, info = self._model.transcribe(
            audio,
            language=language or None,  # None: Whisper detects it (unreliable on very short clips)
            task="transcribe",
            beam_size=self.beam_size,
            temperature=0.0,
            initial_prompt=ZH_PROMPT if language.startswith("zh") else None,
            condition_on_previous_text=False,
            without_timestamps=True,
            # bound hallucination loops on unclear audio (they took seconds and produced pages)
            no_repeat_ngram_size=3,
            max_new_tokens=64,
            vad_filter=False,
        )
        return "".join(segment.text for segment in segments).strip(), str(language or info.language)


class WhisperAsr(UtteranceAsr):
    """The ASR stage over a loaded ``WhisperEngine``; it records the model and the beam size."""

    def __init__(self, engine: WhisperEngine, language: str) -> None:
        attributes = (("asr.model", engine.name), ("asr.beam_size", engine.beam_size))
        super().__init__(engine, language, StageInfo("asr", "whisper", attributes=attributes), WHISPER_LANGUAGES)


@dataclass(frozen=True, slots=True)
class WhisperSettings:
    """The ``[asr]`` keys of ``impl = "whisper"``: the model, the beam size and the CPU threads it decodes on."""

    model: str = "whisper-base"
    beam_size: int = 1
    threads: int = 2

    def __post_init__(self) -> None:
        require_positive("asr", beam_size=self.beam_size, threads=self.threads)


def _load(s: WhisperSettings, models: Models) -> Loaded:
    return load_file(models, s.model, lambda path: WhisperEngine(path, threads=s.threads, beam_size=s.beam_size))


def _build(_s: WhisperSettings, engine: WhisperEngine, turn: TurnInputs) -> WhisperAsr:
    return WhisperAsr(engine, turn.language)


IMPLEMENTATION = Implementation(
    "asr", "whisper", WhisperSettings, _build, load=_load, languages=WHISPER_LANGUAGES, detects_language=True
)
