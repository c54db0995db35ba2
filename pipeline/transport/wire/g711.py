"""G.711 mu-law (ITU-T G.711, the North American companding law), the telephone network's 8 kHz audio.

Twilio Media Streams carry it base64-encoded (``wire.twilio``). Both directions are tables built once from the
standard's definition: decoding is one lookup per byte (256 entries), encoding one per 16-bit sample (65,536),
so no per-sample Python runs on a call's audio. Python 3.13 removed ``audioop``, which used to do this; the tests
hold these tables to it, sample for sample, where it still exists.
"""

from __future__ import annotations

from typing import Final

import numpy as np

BIAS: Final = 0x84  # added before the segment is found, so every segment's steps are the same relative size
CLIP: Final = 8159  # the largest 14-bit magnitude the law encodes (in 16-bit terms 32635)
SAMPLE_RATE: Final = 8000
SEGMENT_ENDS: Final = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])  # 14-bit, each segment's top


def _decoding() -> np.ndarray:
    code = ~np.arange(256, dtype=np.int32) & 0xFF
    exponent = (code >> 4) & 0x07
    mantissa = code & 0x0F
    magnitude = (((mantissa << 3) + BIAS) << exponent) - BIAS
    return np.where(code & 0x80, -magnitude, magnitude).astype(np.int16)


def _encoding() -> np.ndarray:
    # the reference implementation's (Sun's g711.c, which audioop and most stacks use): 14-bit magnitude, the
    # negative half shifted arithmetically (one step lower at each segment's edge than a symmetric law would give)
    pcm = np.arange(-32768, 32768, dtype=np.int32) >> 2
    mask = np.where(pcm < 0, 0x7F, 0xFF)
    magnitude = np.minimum(np.abs(pcm), CLIP) + (BIAS >> 2)
    segment = np.searchsorted(SEGMENT_ENDS, magnitude, side="left")
    code = np.where(
        segment >= len(SEGMENT_ENDS),
        0x7F,
        (np.minimum(segment, 7) << 4) | ((magnitude >> (np.minimum(segment, 7) + 1)) & 0x0F),
    )
    return (code ^ mask).astype(np.uint8)


DECODE: Final = _decoding()
ENCODE: Final = _encoding()


def decode(ulaw: bytes) -> np.ndarray:
    """mu-law bytes as 16-bit linear samples."""
    return np.asarray(DECODE[np.frombuffer(ulaw, dtype=np.uint8)], dtype=np.int16)


def encode(pcm: np.ndarray) -> bytes:
    """16-bit linear samples as mu-law bytes."""
    return ENCODE[np.asarray(pcm, dtype=np.int16).astype(np.int32) + 32768].tobytes()
