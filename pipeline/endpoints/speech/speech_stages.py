"""The lab's configured ASR and TTS stages, as the speech services run them for each request.

The implementations come from the stage registry under the configuration's ``[asr] impl`` and
``[tts] impl``, with their settings read from the same sections, and their models are loaded
once, exactly as a run loads them; each request builds its stage for one "turn" and drives it
with the events the pipeline would: the upload's 60 ms frames and an end-point for the ASR, one
sentence for the TTS. A stage runs its engine on the engine's own thread (``stages.threads``),
so the event loop keeps serving meanwhile.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.events import Event, Sentence, SpeechEnd, Stage
from pipeline.settings.audio import frames_from_pcm
from pipeline.settings.config import Config
from stages.catalog import registry
from stages.registry import Implementation, Models, TurnInputs


@dataclass(frozen=True, slots=True)
class Role:
    """One role's implementation, its settings and its loaded engine (None when it loads nothing)."""

    impl: Implementation
    settings: Any
    engine: object
    identity: str  # the loaded model's identity, as config_id records it ("" when none)

    @property
    def model_id(self) -> str:
        """The id ``GET /v1/models`` lists for it."""
        return f"lab-{self.impl.role}-{self.impl.name}"


def _load(cfg: Config, role: str, models: Models) -> Role:
    impl = registry().get(role, getattr(cfg, role).impl)
    settings = impl.settings_from(getattr(cfg, role))
    if impl.load is None:
        return Role(impl, settings, None, "")
    loaded = impl.load(settings, models)
    return Role(impl, settings, loaded.engine, loaded.identity)


class SpeechStages:
    """The configured ASR and TTS, loaded once and shared by every request."""

    def __init__(self, asr: Role, tts: Role) -> None:
        self.asr, self.tts = asr, tts

    @classmethod
    def load(cls, cfg: Config, models: Models) -> SpeechStages:
        """Load the models ``cfg`` names for ASR and TTS; a missing or broken model raises here, before serving."""
        return cls(_load(cfg, "asr", models), _load(cfg, "tts", models))

    def asr_stage(self, language: str, text: str = "") -> Stage:
        """The ASR stage for one request; ``language`` "" lets it detect the language; ``text`` is the question
        an oracle ASR hears (``heard.py``). ``ValueError`` names the languages it supports when ``language`` is not
        one of them."""
        languages = self.asr.impl.languages
        if language and languages is not None and language not in languages:
            raise ValueError(f"[asr] impl = {self.asr.impl.name!r} supports {', '.join(languages)}, not {language!r}")
        if not language and not self.asr.impl.detects_language:
            raise ValueError(f"[asr] impl = {self.asr.impl.name!r} cannot detect a language: give 'language'")
        return self._build(self.asr, TurnInputs(text=text, language=language))

    def tts_stage(self) -> Stage:
        return self._build(self.tts, TurnInputs(text="", language=""))

    @staticmethod
    def _build(role: Role, turn: TurnInputs) -> Stage:
        stage: Stage = role.impl.build(role.settings, role.engine, turn)
        return stage


def asr_events(pcm: bytes, duration_ms: int) -> list[Event]:
    """What an ASR stage sees of an utterance: its 60 ms frames, then the end-point at its end."""
    return [*frames_from_pcm(pcm), SpeechEnd(offset_ms=duration_ms)]


def tts_events(text: str) -> list[Event]:
    """What a TTS stage sees of a text: one sentence."""
    return [Sentence(index=0, text=text, call_index=0, first_token=0)]


async def run_stage(stage: Stage, events: Sequence[Event]) -> AsyncIterator[Event]:
    """The stage's output for ``events``, as it yields it."""

    async def source() -> AsyncIterator[Event]:
        for event in events:
            yield event

    async for out in stage.run(source()):
        yield out
