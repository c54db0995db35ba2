"""The stages a turn's input calls for: speech end-pointed by the VAD, push-to-talk, or typed text.

xiaozhi devices ask for turns three ways. In auto and realtime mode the server's VAD decides
where an utterance ends; in manual mode the device decides (``listen stop``) and the real
server turns its VAD off (xiaozhi-esp32-server ``vad/silero.py``: manual mode is always voice);
``listen detect`` carries text, answered without any audio. The run's stages are built once
from the settings; these swap the front of the chain for the last two.
"""

from __future__ import annotations

import dataclasses

from pipeline.run.turn import ServerStages
from stages.asr import NoAudio, TypedText
from stages.vad import ManualEndpoint


def push_to_talk(stages: ServerStages) -> ServerStages:
    """Manual mode: every frame up to ``listen stop`` is the utterance."""
    return dataclasses.replace(stages, vad=ManualEndpoint())


def written_language(text: str) -> str:
    """The language a text's characters are written in: Chinese when any is a CJK ideograph, else English."""
    return "zh" if any("\u3400" <= ch <= "\u9fff" for ch in text) else "en"


def typed(stages: ServerStages, text: str) -> ServerStages:
    """A typed question: its text is the transcript, in the language its characters are written in."""
    return dataclasses.replace(stages, vad=NoAudio(), asr=TypedText(text, written_language(text)))
