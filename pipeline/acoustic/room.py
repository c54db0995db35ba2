"""A simulated room: what one microphone on a desk hears of an emulator's stereo recording.

The person (the recording's left channel: what the device's microphone sent, so what was said) and the
device's speaker (the right channel) stand at two places in a shoebox room; each reaches the microphone
through its own room impulse response (pyroomacoustics, image sources up to ``max_order`` reflections
with the absorption that gives ``rt60``). Noise is added at ``snr_db`` below the speech, and the whole
recording is delayed by a sound-card latency the measurement is not told (``latency_ms``: drawn from
``LATENCY_MS`` by the seed when not given). Everything is seeded: the same inputs give the same samples.

``RoomRender`` says where each source's direct sound lands (``shift_of``), so a test or the bench can
carry a sample of the stereo recording to the room recording: the truth to compare a measurement with.
For the lab's tests and ``scripts/bench_acoustic.py``; pyroomacoustics and scipy come with the ``dev`` extra.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LATENCY_MS = (40.0, 150.0)  # the sound-card latencies: an output plus an input buffer, unknown
ROOM_M = (5.0, 4.0, 2.7)  # a living room
PERSON_M = (1.2, 2.0, 1.6)  # the person's mouth (the lab's speaker playing the questions)
DEVICE_M = (3.0, 1.9, 0.9)  # the device on a table, nearer the microphone than the person
MIC_M = (2.5, 1.5, 1.0)  # the room microphone on the desk between them


@dataclass(frozen=True, slots=True)
class RoomRender:
    """The room microphone's samples and where each source's direct sound lands in them."""

    mic: np.ndarray  # float64, -1..1, at the recording's rate
    rate: int
    latency: int  # samples of sound-card latency before everything
    person_delay: int  # samples from the person to the microphone (the direct path)
    device_delay: int  # samples from the device's speaker to the microphone

    def shift_of(self, channel: int) -> int:
        """Samples a sound of the stereo recording's ``channel`` (0: person, 1: device) is late in the room."""
        return self.latency + (self.person_delay if channel == 0 else self.device_delay)


def render_room(
    stereo: np.ndarray,
    rate: int,
    seed: int,
    snr_db: float = 20.0,
    latency_ms: float | None = None,
    rt60: float = 0.3,
    max_order: int = 3,
) -> RoomRender:
    """The room microphone's recording of ``stereo`` (samples x 2: microphone, speaker; floats -1..1)."""
    import pyroomacoustics as pra  # only the tests and the bench simulate rooms
    from scipy.signal import oaconvolve

    if stereo.ndim != 2 or stereo.shape[1] != 2:
        raise ValueError(f"a stereo recording (samples x 2) is needed, not shape {stereo.shape}")
    rng = np.random.default_rng(seed)
    latency = round((latency_ms if latency_ms is not None else rng.uniform(*LATENCY_MS)) * rate / 1000)
    absorption, _ = pra.inverse_sabine(rt60, ROOM_M)
    room = pra.ShoeBox(ROOM_M, fs=rate, materials=pra.Material(absorption), max_order=max_order)
    room.add_source(list(PERSON_M))
    room.add_source(list(DEVICE_M))
    room.add_microphone(list(MIC_M))
    room.compute_rir()
    rirs = [np.asarray(room.rir[0][s], dtype=np.float64) for s in (0, 1)]
    heard = [oaconvolve(stereo[:, s].astype(np.float64), rirs[s])[: len(stereo)] for s in (0, 1)]
    clean = heard[0] + heard[1]
    noise = rng.standard_normal(len(clean)) * np.sqrt(_speech_power(heard[0], stereo[:, 0]) / 10 ** (snr_db / 10))
    mic = np.concatenate((rng.standard_normal(latency) * noise.std(), clean + noise))
    peak = float(np.max(np.abs(mic))) if len(mic) else 0.0
    if peak > 0.99:  # a recording level the sound card would not clip
        mic *= 0.99 / peak
    return RoomRender(mic, rate, latency, _direct(rirs[0]), _direct(rirs[1]))


def _speech_power(heard: np.ndarray, said: np.ndarray) -> float:
    """The person's mean power at the microphone while speaking (the SNR's reference)."""
    speaking = np.abs(said) > 64 / 32768
    return float(np.mean(np.square(heard[speaking]))) if speaking.any() else float(np.mean(np.square(heard)) or 1e-12)


def _direct(rir: np.ndarray) -> int:
    """The sample where the direct sound arrives: the impulse response's first strong peak."""
    strong = np.nonzero(np.abs(rir) >= 0.5 * np.max(np.abs(rir)))[0]
    return int(strong[0])
