"""Opus encoder presets (the lab's, the firmware's, the real server's) and a decoder for any of their streams."""

from __future__ import annotations

import numpy as np
import opuslib_next as opus
import pytest
import soxr

from pipeline.events import FRAME_BYTES, SAMPLE_RATE
from pipeline.transport.wire.opus import PRESETS, CodecError, OpusDecoder, OpusEncoder, _Resampler, audible

TONE_HZ = 440.0


def tone(frames: int, rate: int = SAMPLE_RATE, amplitude: int = 8000) -> list[bytes]:
    """A continuous 440 Hz tone cut into 60 ms frames of 16-bit PCM."""
    per_frame = rate * 60 // 1000
    t = np.arange(frames * per_frame) / rate
    samples = (amplitude * np.sin(2 * np.pi * TONE_HZ * t)).astype("<i2")
    return [samples[i * per_frame : (i + 1) * per_frame].tobytes() for i in range(frames)]


def dominant_hz(pcm: bytes, rate: int = SAMPLE_RATE) -> float:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.size)))
    return float(np.fft.rfftfreq(samples.size, 1 / rate)[int(np.argmax(spectrum))])


def settings(encoder: OpusEncoder) -> dict[str, int]:
    """What libopus itself reports for the encoder's settings."""
    raw = encoder._encoder
    return {
        "sample_rate": raw.sample_rate,
        "application": raw.application,
        "complexity": raw.complexity,
        "bitrate": raw.bitrate,
        "vbr": raw.vbr,
        "dtx": raw.dtx,
        "signal": raw.signal,
    }


def test_the_presets_are_named_and_an_unknown_one_lists_them() -> None:
    assert list(PRESETS) == ["lab", "firmware", "xiaozhi-server"]
    with pytest.raises(ValueError, match="unknown Opus encoder preset 'esp32'; known: lab, firmware, xiaozhi-server"):
        OpusEncoder("esp32")


def test_the_lab_preset_is_the_encoder_the_lab_always_had() -> None:
    got = settings(OpusEncoder())
    assert (got["sample_rate"], got["application"], got["complexity"]) == (16000, opus.APPLICATION_VOIP, 5)
    assert (got["vbr"], got["dtx"], got["signal"]) == (1, 0, opus.AUTO)


def test_the_firmware_preset_is_audio_application_complexity_0_dtx_and_vbr() -> None:
    # xiaozhi-esp32 main/audio/audio_service.h:65-76
    encoder = OpusEncoder("firmware")
    got = settings(encoder)
    assert encoder.sample_rate == got["sample_rate"] == 16000
    assert (got["application"], got["complexity"], got["dtx"], got["vbr"]) == (opus.APPLICATION_AUDIO, 0, 1, 1)


def test_the_xiaozhi_server_preset_is_24_khz_audio_complexity_10_24_kbps_voice() -> None:
    # xiaozhi-esp32-server core/utils/opus_encoder_utils.py:33-47
    encoder = OpusEncoder("xiaozhi-server")
    got = settings(encoder)
    assert encoder.sample_rate == got["sample_rate"] == 24000
    assert (got["application"], got["complexity"], got["bitrate"]) == (opus.APPLICATION_AUDIO, 10, 24000)
    assert got["signal"] == opus.SIGNAL_VOICE


def test_firmware_dtx_sends_silence_as_tiny_packets_the_lab_does_not() -> None:
    silence = bytes(FRAME_BYTES)
    firmware, lab = OpusEncoder("firmware"), OpusEncoder("lab")
    tiny = [len(firmware.encode(silence)) for _ in range(20)]
    plain = [len(lab.encode(silence)) for _ in range(20)]
    assert sum(n <= 2 for n in tiny[5:]) >= 10
    assert min(plain) > 2


def test_every_preset_round_trips_to_16_khz_frames_of_the_same_tone() -> None:
    for name in PRESETS:
        encoder, decoder = OpusEncoder(name), OpusDecoder()
        decoded = [decoder.decode(encoder.encode(pcm)) for pcm in tone(10)]
        assert all(len(pcm) == FRAME_BYTES for pcm in decoded), name
        assert audible(decoded[-1]), name
        assert abs(dominant_hz(b"".join(decoded[2:])) - TONE_HZ) < 10, name


def test_the_servers_24_khz_stream_decodes_at_24_khz_too() -> None:
    encoder, decoder = OpusEncoder("xiaozhi-server"), OpusDecoder(24000)
    decoded = [decoder.decode(encoder.encode(pcm)) for pcm in tone(5)]
    assert [len(pcm) for pcm in decoded] == [24000 * 60 // 1000 * 2] * 5
    assert abs(dominant_hz(b"".join(decoded[2:]), 24000) - TONE_HZ) < 10


def test_the_decoder_takes_20_40_and_60_ms_packets() -> None:
    pcm = b"".join(tone(1))
    for ms in (20, 40, 60):
        samples = SAMPLE_RATE * ms // 1000
        packet = opus.Encoder(SAMPLE_RATE, 1, opus.APPLICATION_AUDIO).encode(pcm[: samples * 2], samples)
        assert len(OpusDecoder().decode(packet)) == samples * 2, ms


def test_an_empty_packet_is_a_codec_error_not_invented_audio() -> None:
    with pytest.raises(CodecError, match="empty"):
        OpusDecoder().decode(b"")


def test_resampling_to_24_khz_is_one_stream_without_clicks_at_frame_edges() -> None:
    resampler = _Resampler(24000)
    frames = tone(12)
    out = [resampler.frame(pcm) for pcm in frames]
    assert [len(pcm) for pcm in out] == [1440 * 2] * 12  # one 24 kHz frame per 16 kHz frame, always
    stream = np.frombuffer(b"".join(out), dtype="<i2").astype(np.int32)
    lookahead = np.zeros(64, dtype="<i2")  # the resampler's 4 ms delay
    whole = np.frombuffer(lookahead.tobytes() + b"".join(frames), dtype="<i2")
    at_once = soxr.resample(whole, SAMPLE_RATE, 24000).astype(np.int32)[: stream.size]
    assert np.abs(stream - at_once).max() <= 4  # as if the whole turn were resampled at once
