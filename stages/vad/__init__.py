"""Voice activity detection: the end-pointer and its frame classifiers, one module per implementation."""

from stages.vad import energy, fsmn, silero
from stages.vad.endpointer import FrameClassifier, FrameVad

IMPLEMENTATIONS = (silero.IMPLEMENTATION, energy.IMPLEMENTATION, fsmn.IMPLEMENTATION)

__all__ = ["IMPLEMENTATIONS", "FrameClassifier", "FrameVad"]
