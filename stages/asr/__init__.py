"""Speech recognition: one module per implementation, whole-utterance engines sharing one base.

``typed.TypedText`` (with the VAD ``NoAudio``) is registered nowhere: the server builds it for a question
typed rather than spoken (xiaozhi's ``listen detect``).
"""

from stages.asr import funasr, oracle, transcriptions, whisper
from stages.asr.typed import NoAudio, TypedText

IMPLEMENTATIONS = (whisper.IMPLEMENTATION, funasr.IMPLEMENTATION, oracle.IMPLEMENTATION, transcriptions.IMPLEMENTATION)

__all__ = ["IMPLEMENTATIONS", "NoAudio", "TypedText"]
