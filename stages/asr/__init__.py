"""Speech recognition: one module per implementation, whole-utterance engines sharing one base."""

from stages.asr import funasr, oracle, service, whisper

IMPLEMENTATIONS = (whisper.IMPLEMENTATION, funasr.IMPLEMENTATION, oracle.IMPLEMENTATION, service.IMPLEMENTATION)

__all__ = ["IMPLEMENTATIONS"]
