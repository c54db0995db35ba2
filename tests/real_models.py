"""Shared, once-per-session loading of the real packaged models for tests.

A missing model package fails these tests with the registry's message (what to
install); it is never a skip.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from pipeline.settings.models import default_cache, resolve
from stages.asr.whisper import WhisperEngine
from stages.llm.llama import LlamaEngine, LlamaSettings
from stages.tts.piper import PiperEngine
from stages.vad.fsmn import FsmnVadModel
from stages.vad.silero import SileroModel

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "audio_fixtures"
CACHE = default_cache(os.environ)
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


@cache
def silero() -> SileroModel:
    return SileroModel(resolve("silero-vad", CACHE))


@cache
def fsmn() -> FsmnVadModel:
    return FsmnVadModel(resolve("fsmn-vad", CACHE), silence_ms=600)


@cache
def whisper() -> WhisperEngine:
    return WhisperEngine(resolve("whisper-base", CACHE), threads=2)


@cache
def llama(name: str = "qwen2.5-coder-0.5b") -> LlamaEngine:
    return LlamaEngine(resolve(name, CACHE), LlamaSettings(n_ctx=2048, threads=2))


@cache
def piper() -> PiperEngine:
    return PiperEngine(resolve("piper-joe", CACHE))
