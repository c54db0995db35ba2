"""Voice activity detection: the end-pointers and their classifiers, one module per implementation.

``manual.ManualEndpoint`` is registered nowhere: the server builds it for ``listen`` mode "manual".
"""

from pipeline.events import XiaozhiServerProfile
from stages.vad import energy, fsmn, silero, smart_turn, ten
from stages.vad.endpointer import FrameClassifier, FrameVad
from stages.vad.manual import ManualEndpoint
from stages.vad.xiaozhi import ChunkClassifier, XiaozhiServerVad

IMPLEMENTATIONS = (
    silero.IMPLEMENTATION,
    energy.IMPLEMENTATION,
    fsmn.IMPLEMENTATION,
    ten.IMPLEMENTATION,
    smart_turn.IMPLEMENTATION,
)

__all__ = [
    "IMPLEMENTATIONS",
    "ChunkClassifier",
    "FrameClassifier",
    "FrameVad",
    "ManualEndpoint",
    "XiaozhiServerProfile",
    "XiaozhiServerVad",
]
