"""FunASR ASR (SenseVoiceSmall, Paraformer...) on a user's local model folder.

No FunASR ASR model ships in a registry package, so the user points at a folder
(``[asr] model = "/path/to/SenseVoiceSmall"``). Loading goes through
``funasr.AutoModel`` with ``disable_update=True``; a folder holding another kind
of model (a VAD, say) is refused before the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.events import StageInfo
from stages.asr.utterance import UtteranceAsr, UtteranceEngine
from stages.funasr_loader import load_automodel
from stages.registry import ConfigError, Implementation, Loaded, Models, TurnInputs, load_file

FUNASR_LANGUAGES = ("zh", "en")


class FunAsrEngine(UtteranceEngine):
    """A FunASR speech recognition model loaded from its folder (a VAD or punctuation model is refused)."""

    def __init__(self, model_dir: Path) -> None:
        self.model: Any = load_automodel(model_dir)
        kind = type(self.model.model).__name__
        if "VAD" in kind.upper() or "PUNC" in kind.upper():
            raise ValueError(f"{model_dir}: a {kind} model, not a FunASR speech recognition model")
        super().__init__(model_dir.name)

    def decode(self, audio: np.ndarray, language: str) -> tuple[str, str]:
        from funasr.utils.postprocess_utils import rich_transcription_postprocess

        asked = language or "auto"
        result = self.model.generate(input=audio, language=asked, use_itn=True, disable_pbar=True)
        raw = str(result[0]["text"]) if result else ""
        found = next((tag for tag in FUNASR_LANGUAGES if f"<|{tag}|>" in raw), asked)
        return str(rich_transcription_postprocess(raw)).strip(), found


class FunAsr(UtteranceAsr):
    """The ASR stage over a loaded ``FunAsrEngine``; it tells Chinese from English itself."""

    def __init__(self, engine: FunAsrEngine, language: str) -> None:
        info = StageInfo(role="asr", impl="funasr", attributes=(("asr.model", engine.name),))
        super().__init__(engine, language, info, FUNASR_LANGUAGES)


@dataclass(frozen=True, slots=True)
class FunAsrSettings:
    """The ``[asr]`` keys of ``impl = "funasr"``: the model folder, which no package ships, so none by default."""

    model: str = ""  # a FunASR ASR model folder (SenseVoiceSmall, Paraformer...)


def _load(s: FunAsrSettings, models: Models) -> Loaded:
    if not s.model:  # refused here, not by the settings: a settings class must build from its defaults alone
        raise ConfigError("[asr] impl = 'funasr' needs model = a FunASR model folder (e.g. SenseVoiceSmall)")
    return load_file(models, s.model, FunAsrEngine)


def _build(_s: FunAsrSettings, engine: FunAsrEngine, turn: TurnInputs) -> FunAsr:
    return FunAsr(engine, turn.language)


IMPLEMENTATION = Implementation(
    "asr", "funasr", FunAsrSettings, _build, load=_load, languages=FUNASR_LANGUAGES, detects_language=True
)
