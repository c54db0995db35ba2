"""Speech synthesis: one module per implementation, and the framing of their audio into 60 ms frames."""

from stages.tts import espeak, piper, service, stub

IMPLEMENTATIONS = (espeak.IMPLEMENTATION, piper.IMPLEMENTATION, stub.IMPLEMENTATION, service.IMPLEMENTATION)

__all__ = ["IMPLEMENTATIONS"]
