"""The Opus check a UDP datagram's payload must pass: what the device's encoders send passes, a forger's random
bytes almost never do, and its verdict is the decoder's."""

from __future__ import annotations

import random

import pytest

from pipeline.events import FRAME_BYTES
from pipeline.transport.wire.opus import PRESETS, CodecError, OpusDecoder, OpusEncoder
from pipeline.transport.wire.opus_shape import OpusShape
from tests.scenario import TONE


@pytest.mark.parametrize("preset", [name for name, p in PRESETS.items() if p.sample_rate == 16000])
def test_what_a_16_khz_device_encoder_sends_fits_its_hellos_shape(preset: str) -> None:
    encoder, shape = OpusEncoder(preset), OpusShape(60)
    packets = [encoder.encode(pcm) for pcm in [bytes(FRAME_BYTES)] * 5 + [TONE] * 10 + [bytes(FRAME_BYTES)] * 20]
    assert all(shape.fits(packet) for packet in packets)  # speech, silence and DTX's one-byte frames
    assert not any(OpusShape(20).fits(packet) for packet in packets)  # a 60 ms packet is not a 20 ms one


def test_the_verdict_is_the_decoders_and_a_forgers_random_bytes_pass_about_one_time_in_86() -> None:
    """The shape adds mono, 16 kHz or narrower, and the frame duration to what libopus decodes."""
    draw, decoder, shape = random.Random(42), OpusDecoder(), OpusShape(60)
    payloads = [draw.randbytes(1 + i % 160) for i in range(40_000)]
    passed = 0
    for payload in payloads:
        fits = shape.fits(payload)
        passed += fits
        try:
            pcm = decoder.decode(payload)
        except CodecError:
            assert not fits
            continue
        narrow_mono = payload[0] & 0x04 == 0 and (payload[0] >> 3 < 12 or 16 <= payload[0] >> 3 < 24)
        assert fits == (len(pcm) == FRAME_BYTES and narrow_mono)
    assert 0.009 < passed / len(payloads) < 0.015


def test_an_empty_payload_is_no_packet() -> None:
    assert not OpusShape(60).fits(b"")  # libopus would conceal it as a lost packet
