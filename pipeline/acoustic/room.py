"""A simulated room: what one microphone on a desk hears of an emulator's stereo recording.

The person (the recording's left channel: what the device's microphone sent, so what was said) and the
device's speaker (the right channel) stand at two places in a shoebox room; each reaches the microphone
through its own room impulse response (pyroomacoustics' image sources). The walls' absorption and the
image-source order are the ones the requested RT60 needs (``pra.inverse_sabine``: every reflection until
the sound has decayed by 60 dB, not a few early ones), and since Sabine's formula is only an estimate of
what the image sources give, the RT60 is measured on the person's own impulse response (the Schroeder
decay's T30) and the absorption corrected once when it is more than ``RT60_SLACK`` off; ``RoomRender.rt60``
is the measured one. ``distance_m`` puts the person and the device that far from the microphone (near,
1.5 m; far, 3 m); without it they stand where a desk puts them (``PERSON_M``, ``DEVICE_M``). Noise, white or
pink, is added at ``snr_db`` below the person's speech at the microphone, and the whole recording is delayed
by a sound-card latency the measurement is not told (``latency_ms``: drawn from ``LATENCY_MS`` by the seed when
not given). Everything is seeded: the same inputs give the same samples.

``RoomRender`` says where each source's direct sound lands (``shift_of``), so a test or the bench can
carry a sample of the stereo recording to the room recording: the truth to compare a measurement with.
For the lab's tests and ``scripts/bench_acoustic.py``; pyroomacoustics and scipy come with the ``dev`` extra.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

LATENCY_MS = (40.0, 150.0)  # the sound-card latencies: an output plus an input buffer, unknown
ROOM_M = (5.0, 4.0, 2.7)  # a living room
PERSON_M = (1.2, 2.0, 1.6)  # the person's mouth (the lab's speaker playing the questions)
DEVICE_M = (3.0, 1.9, 0.9)  # the device on a table, nearer the microphone than the person
MIC_M = (2.5, 1.5, 1.0)  # the room microphone on the desk between them
# with distance_m: the microphone near a corner, the person and the device along two directions from it that
# stay inside the room up to 3.2 m away (unit vectors)
CORNER_MIC_M = (1.0, 1.0, 1.0)
PERSON_WAY = (0.8, 0.55, 0.24)
DEVICE_WAY = (0.99, 0.12, -0.05)
PINK_FROM_HZ = 20.0  # pink noise starts here: the bottom of hearing and of a sound card's input
HEARD_WITHIN_S = 2.0  # how far an answer's sound is followed to where it comes out of the noise
RT60_SLACK = 0.05  # the measured RT60 this far (a share) from the requested one: the absorption is corrected once
Noise = Literal["white", "pink"]
NOISES: tuple[Noise, ...] = ("white", "pink")


@dataclass(frozen=True, slots=True)
class RoomRender:
    """The room microphone's samples, where each source's direct sound lands in them, and the room's
    reverberation as measured on the person's impulse response."""

    mic: np.ndarray  # float64, -1..1, at the recording's rate
    rate: int
    latency: int  # samples of sound-card latency before everything
    person_delay: int  # samples from the person to the microphone (the direct path)
    device_delay: int  # samples from the device's speaker to the microphone
    rt60: float = 0.0  # seconds, measured (T30 of the Schroeder decay)
    max_order: int = 0  # the image sources' reflection order rendered
    device: np.ndarray | None = None  # the device's sound alone at the microphone (no noise, no person), as mic
    person: np.ndarray | None = None  # the person's sound alone at the microphone (the questions and their tails)
    noise_power: float = 0.0  # the noise's mean power in mic

    def heard_from(self, at: int, window_ms: float = 4.0) -> int | None:
        """The first sample from ``at`` where the device's sound alone reaches the power of everything else there
        (the noise and what is left of the question's reverberation: 0 dB in a ``window_ms`` window centred
        there): where its answer comes out of the rest. None if not within ``HEARD_WITHIN_S``."""
        if self.device is None or self.person is None:
            return None
        width = max(1, round(window_ms * self.rate / 1000))
        lo, hi = max(0, at - width), at + round(HEARD_WITHIN_S * self.rate)
        kernel = np.ones(width) / width
        power = np.convolve(np.square(self.device[lo:hi]), kernel, mode="same")
        rest = np.convolve(np.square(self.person[lo:hi]), kernel, mode="same") + self.noise_power
        loud = np.nonzero(power[at - lo :] >= rest[at - lo :])[0]
        return at + int(loud[0]) if len(loud) else None

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
    distance_m: float | None = None,
    noise: Noise = "white",
) -> RoomRender:
    """The room microphone's recording of ``stereo`` (samples x 2: microphone, speaker; floats -1..1)."""
    from scipy.signal import oaconvolve  # only the tests and the bench simulate rooms

    if stereo.ndim != 2 or stereo.shape[1] != 2:
        raise ValueError(f"a stereo recording (samples x 2) is needed, not shape {stereo.shape}")
    rng = np.random.default_rng(seed)
    latency = round((latency_ms if latency_ms is not None else rng.uniform(*LATENCY_MS)) * rate / 1000)
    rirs, measured, order = impulse_responses(rate, rt60, distance_m)
    heard = [oaconvolve(stereo[:, s].astype(np.float64), rirs[s])[: len(stereo)] for s in (0, 1)]
    clean = heard[0] + heard[1]
    level = np.sqrt(_speech_power(heard[0], stereo[:, 0]) / 10 ** (snr_db / 10))
    hiss = _noise(rng, len(clean) + latency, noise, rate) * level
    mic = np.concatenate((np.zeros(latency), clean)) + hiss
    peak = float(np.max(np.abs(mic))) if len(mic) else 0.0
    gain = 0.99 / peak if peak > 0.99 else 1.0  # a recording level the sound card would not clip
    device, person = (np.concatenate((np.zeros(latency), heard[s])) * gain for s in (1, 0))
    directs = _direct(rirs[0]), _direct(rirs[1])
    return RoomRender(mic * gain, rate, latency, *directs, measured, order, device, person, (level * gain) ** 2)


def impulse_responses(rate: int, rt60: float, distance_m: float | None) -> tuple[list[np.ndarray], float, int]:
    """The person's and the device's impulse responses at the microphone, the RT60 measured on the person's and
    the reflection order, for a room asked to decay in ``rt60`` seconds."""
    person, device, mic = _places(distance_m)
    rirs, order = _rendered(rate, rt60, person, device, mic)
    measured = measure_rt60(rirs[0], rate)
    if abs(measured - rt60) > RT60_SLACK * rt60:  # Sabine's estimate missed what the image sources give: aim again
        rirs, order = _rendered(rate, rt60 * rt60 / measured, person, device, mic)
        measured = measure_rt60(rirs[0], rate)
    return rirs, measured, order


def measure_rt60(rir: np.ndarray, rate: int) -> float:
    """Seconds for the impulse response's energy to fall by 60 dB: the Schroeder decay's slope from -5 to -35 dB,
    extrapolated (T30)."""
    import pyroomacoustics as pra

    return float(pra.experimental.measure_rt60(rir, fs=rate, decay_db=30))


def _rendered(
    rate: int, rt60: float, person: tuple[float, ...], device: tuple[float, ...], mic: tuple[float, ...]
) -> tuple[list[np.ndarray], int]:
    import pyroomacoustics as pra

    absorption, order = pra.inverse_sabine(rt60, ROOM_M)
    room = pra.ShoeBox(ROOM_M, fs=rate, materials=pra.Material(absorption), max_order=order)
    room.add_source(list(person))
    room.add_source(list(device))
    room.add_microphone(list(mic))
    room.compute_rir()
    return [np.asarray(room.rir[0][s], dtype=np.float64) for s in (0, 1)], int(order)


def _places(distance_m: float | None) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """The person's, the device's and the microphone's places."""
    if distance_m is None:
        return PERSON_M, DEVICE_M, MIC_M
    at = np.asarray(CORNER_MIC_M)
    person, device = (tuple(float(v) for v in at + distance_m * np.asarray(way)) for way in (PERSON_WAY, DEVICE_WAY))
    for name, place in (("person", person), ("device", device)):
        if not all(0.1 <= v <= side - 0.1 for v, side in zip(place, ROOM_M, strict=True)):
            raise ValueError(f"{distance_m} m from the microphone puts the {name} outside the {ROOM_M} m room")
    return person, device, CORNER_MIC_M


def _noise(rng: np.random.Generator, n: int, kind: Noise, rate: int) -> np.ndarray:
    """Unit-power noise: white, or pink (power falling 3 dB an octave, as a room's hum and fans are) from
    ``PINK_FROM_HZ`` up: a microphone and a sound card pass nothing much lower, and a pink spectrum taken down to
    a fraction of a hertz would put most of its power in a slow drift no one hears."""
    white = rng.standard_normal(n)
    if kind == "white" or n < 2:
        return white
    spectrum = np.fft.rfft(white)
    freqs = np.fft.rfftfreq(n, 1 / rate)
    audible = freqs >= PINK_FROM_HZ
    spectrum[audible] /= np.sqrt(freqs[audible] / PINK_FROM_HZ)
    spectrum[~audible] = 0.0
    pink = np.fft.irfft(spectrum, n)
    return np.asarray(pink / np.std(pink))


def _speech_power(heard: np.ndarray, said: np.ndarray) -> float:
    """The person's mean power at the microphone while speaking (the SNR's reference)."""
    speaking = np.abs(said) > 64 / 32768
    return float(np.mean(np.square(heard[speaking]))) if speaking.any() else float(np.mean(np.square(heard)) or 1e-12)


def _direct(rir: np.ndarray) -> int:
    """The sample where the direct sound arrives: the impulse response's first strong peak."""
    strong = np.nonzero(np.abs(rir) >= 0.5 * np.max(np.abs(rir)))[0]
    return int(strong[0])
