"""FunASR ASR (SenseVoiceSmall, Paraformer...) on a user's local model folder.

No FunASR ASR model ships in a registry package, so the user points at a folder
(``[asr] model = "/path/to/SenseVoiceSmall"``). Loading goes through
``funasr.AutoModel`` with ``disable_update=True``; a folder holding another kind
of model (a VAD, say) is refused before the run.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.events import StageInfo
from stages.asr_utterance import UtteranceAsr
from stages.vad_fsmn import load_automodel

FUNASR_LANGUAGES = ("zh", "en")


class FunAsrEngine:
    def __init__(self, model_dir: Path) -> None:
        self.model: Any = load_automodel(model_dir)
        kind = type(self.model.model).__name__
        if "VAD" in kind.upper() or "PUNC" in kind.upper():
            raise ValueError(f"{model_dir}: a {kind} model, not a FunASR speech recognition model")
        self.name = model_dir.name
        self._lock = threading.Lock()
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asr")

    def transcribe(self, pcm: bytes, language: str) -> str:
        from funasr.utils.postprocess_utils import rich_transcription_postprocess

        audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        with self._lock:
            result = self.model.generate(input=audio, language=language, use_itn=True, disable_pbar=True)
        return str(rich_transcription_postprocess(result[0]["text"])).strip() if result else ""


class FunAsr(UtteranceAsr):
    def __init__(self, engine: FunAsrEngine, language: str) -> None:
        info = StageInfo(role="asr", impl="funasr", attributes=(("asr.model", engine.name),))
        super().__init__(engine, language, info, FUNASR_LANGUAGES)
