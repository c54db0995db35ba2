"""faster-whisper ASR: the utterance the VAD passed is transcribed once the end-point comes.

Whisper is not streaming: it always encodes a 30 s window. Temperature 0
(the fallback ladder took 10-20 s on garbage, STACK.md), the language from the
manifest, and for Chinese an initial prompt in Simplified Chinese.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.events import StageInfo
from stages.asr_utterance import UtteranceAsr

WHISPER_LANGUAGES = ("zh", "en")  # what the fixtures and prompts here cover; Whisper knows many more
ZH_PROMPT = "以下是普通话的句子。"


class WhisperEngine:
    """One loaded Whisper model, shared by every turn; one decode at a time."""

    def __init__(self, model_dir: Path, threads: int = 2, beam_size: int = 1) -> None:
        from faster_whisper import WhisperModel

        if not (model_dir / "model.bin").is_file():
            raise ValueError(f"{model_dir}: no model.bin, not a CTranslate2 Whisper model folder")
        try:
            self._model: Any = WhisperModel(str(model_dir), device="cpu", compute_type="int8", cpu_threads=threads)
        except Exception as exc:  # CTranslate2 raises RuntimeError and others for bad files
            raise ValueError(f"{model_dir}: cannot load Whisper model ({exc})") from None
        self.beam_size = beam_size
        self.name = model_dir.name
        self._lock = threading.Lock()
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asr")

    def transcribe(self, pcm: bytes, language: str) -> str:
        audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        with self._lock:
            segments, _info = self._model.transcribe(
                audio,
                language=language,
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
            return "".join(segment.text for segment in segments).strip()


class WhisperAsr(UtteranceAsr):
    def __init__(self, engine: WhisperEngine, language: str) -> None:
        attributes = (("asr.model", engine.name), ("asr.beam_size", engine.beam_size))
        super().__init__(engine, language, StageInfo("asr", "whisper", attributes=attributes), WHISPER_LANGUAGES)
