"""The end-pointer of xiaozhi-esp32-server with its default Silero settings, decision for decision.

Followed (xiaozhi-esp32-server, ``xiaozhi-server/``):

- ``core/providers/vad/silero.py`` ``is_vad`` (lines 55-114): Silero on 512-sample (32 ms) chunks;
  a chunk is voice at p >= ``threshold``, silence at p <= ``threshold_low``, and in between it keeps
  the previous chunk's state; voice is heard while at least ``vote_needed`` of the last
  ``vote_window`` chunks are voice; the utterance is over at the first chunk the vote says silence
  once ``silence_ms`` have passed since the last chunk the vote said voice. That time is wall-clock
  time at the server (``time.time()``), i.e. between frame *arrivals*, not audio time.
- ``config.yaml`` section ``SileroVAD`` (lines 605-610): thresholds 0.5 / 0.3, silence 200 ms; the
  window of 5 and the vote of 3 are ``connection.py:149`` and ``silero.py:37``.
- ``core/providers/asr/base.py`` ``receive_audio`` (lines 61-80): before speech only the last 10
  packets are kept (the pre-roll handed to ASR: 600 ms from the firmware's 60 ms packets, 200 ms from
  a desktop client's 20 ms ones, which arrive here cut into 60 ms frames, ``AudioFrame.packet_ms``);
  an utterance of no more than 15 frames of 60 ms
  (900 ms, pre-roll included) is dropped and listening goes on, with every VAD state cleared
  (``connection.py:1688-1701`` ``reset_audio_states``), the half-filled chunk included. That is the
  path of the real server's non-streaming ASRs (its default FunASR, like the lab's ASRs).

Nothing reaches the next stage before the utterance is long enough to be kept: a cough does not
start a turn, as it does not start one on the real server.

Deliberate difference: the model's recurrent state starts afresh each turn (the real server keeps
it for the whole connection).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import AsyncIterator
from typing import Protocol

from pipeline.events import SAMPLE_RATE, AudioFrame, Event, SpeechEnd, SpeechStart, StageInfo, XiaozhiServerProfile

CHUNK_SAMPLES = 512
CHUNK_BYTES = CHUNK_SAMPLES * 2
PROFILE = "xiaozhi-server"


class ChunkClassifier(Protocol):
    """What ``XiaozhiServerVad`` needs of a classifier: the speech probability of each 512-sample chunk, and a fresh
    start each turn."""

    name: str

    def reset(self) -> None:
        """Forget everything heard: a new turn starts."""

    async def chunk_probability(self, pcm: bytes) -> float:
        """Speech probability of one chunk of ``CHUNK_SAMPLES`` samples (16-bit little-endian PCM); awaited, so
        that a model may batch the chunks of many streams."""


def _ms(samples: int) -> int:
    return samples * 1000 // SAMPLE_RATE


def _pre_roll(held: list[AudioFrame], packets: int) -> list[AudioFrame]:
    """The audio of the device's last ``packets`` packets (asr_audio[-10:]): whole frames when the packets
    were 60 ms, else the oldest frame cut so that ``packets`` x ``packet_ms`` of audio stay."""
    if not held:
        return held
    packet_ms = held[-1].packet_ms or held[-1].duration_ms
    keep = packets * packet_ms * SAMPLE_RATE // 1000 * 2  # bytes
    total = sum(len(f.pcm) for f in held)
    while held and total - len(held[0].pcm) >= keep:
        total -= len(held.pop(0).pcm)
    if held and total > keep:
        first, cut = held[0], total - keep
        held[0] = dataclasses.replace(first, pcm=first.pcm[cut:], duration_ms=_ms((len(first.pcm) - cut) // 2))
    return held


class _Decision:
    """The per-connection VAD fields of the real server (connection.py:148-154) and is_vad's rule."""

    def __init__(self, profile: XiaozhiServerProfile) -> None:
        self.profile = profile
        self.clear()

    def clear(self) -> None:
        self.window: deque[tuple[bool, int]] = deque(maxlen=self.profile.vote_window)  # (voice, chunk start)
        self.last_is_voice = False
        self.have_voice = False  # conn.client_have_voice: once heard, until the utterance ends
        self.voice_stop = False
        self.last_voice_arrival = 0
        self.last_voiced_end = 0  # audio time at the end of the latest voice chunk
        self.speech_start = 0
        self.speech_end = 0

    def chunk(self, p: float, start_ms: int, end_ms: int, arrival_ms: int) -> None:
        if p >= self.profile.threshold:
            is_voice = True
        elif p <= self.profile.threshold_low:
            is_voice = False
        else:
            is_voice = self.last_is_voice
        self.last_is_voice = is_voice
        self.window.append((is_voice, start_ms))
        if is_voice:
            self.last_voiced_end = end_ms
        vote = sum(v for v, _ in self.window) >= self.profile.vote_needed
        if self.have_voice and not vote and arrival_ms - self.last_voice_arrival >= self.profile.silence_ms:
            self.voice_stop = True
        if vote:
            if not self.have_voice:
                self.speech_start = min(start for voice, start in self.window if voice)
            self.have_voice = True
            self.last_voice_arrival = arrival_ms
            if not self.voice_stop:
                self.speech_end = self.last_voiced_end


class _Listener:
    """Cuts the uplink into chunks (conn.client_audio_buffer) and feeds each one's probability to the rule."""

    def __init__(self, classifier: ChunkClassifier, profile: XiaozhiServerProfile) -> None:
        self.classifier = classifier
        self.decision = _Decision(profile)
        self.buffer = b""
        self.buffer_start = 0  # where the buffer's first sample lies in the turn's audio
        self.received = 0  # samples received so far

    async def hear(self, frame: AudioFrame) -> None:
        arrival = frame.arrival_ms if frame.arrival_ms is not None else _ms(self.received)
        self.buffer += frame.pcm
        self.received += len(frame.pcm) // 2
        while len(self.buffer) >= CHUNK_BYTES:
            p = await self.classifier.chunk_probability(self.buffer[:CHUNK_BYTES])
            start = self.buffer_start
            self.decision.chunk(p, _ms(start), _ms(start + CHUNK_SAMPLES), arrival)
            self.buffer = self.buffer[CHUNK_BYTES:]
            self.buffer_start += CHUNK_SAMPLES

    def clear(self) -> None:
        """reset_audio_states: the rule's state and the half-filled chunk go (the model's state stays)."""
        self.decision.clear()
        self.buffer = b""
        self.buffer_start = self.received


class XiaozhiServerVad:
    """Yields ``SpeechStart``, the pre-roll and the utterance's frames, then ``SpeechEnd``.

    ``SpeechStart.offset_ms`` is the start of the earliest voice chunk in the window that first
    voted voice; ``SpeechEnd.offset_ms`` the end of the last voice chunk the vote still counted.
    """

    def __init__(self, classifier: ChunkClassifier, profile: XiaozhiServerProfile | None = None) -> None:
        self.classifier = classifier
        self.profile = profile or XiaozhiServerProfile()
        if problem := self.profile.problem():
            raise ValueError(f"xiaozhi-server VAD profile: {problem}")
        p = self.profile
        self.info = StageInfo(
            role="vad",
            impl=classifier.name,
            attributes=(
                ("vad.profile", PROFILE),
                ("vad.silence_ms", p.silence_ms),
                ("vad.silence_clock", "arrival"),
                ("vad.threshold", p.threshold),
                ("vad.threshold_low", p.threshold_low),
                ("vad.vote", f"{p.vote_needed}/{p.vote_window}"),
                ("vad.pre_speech_frames", p.pre_speech_frames),
                ("vad.min_utterance_ms", p.min_utterance_ms),
            ),
        )

    def _long_enough(self, held: list[AudioFrame]) -> bool:
        return sum(len(f.pcm) for f in held) // 2 > self.profile.min_utterance_ms * SAMPLE_RATE // 1000

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        self.classifier.reset()
        listener = _Listener(self.classifier, self.profile)
        decision = listener.decision
        held: list[AudioFrame] = []  # conn.asr_audio while the utterance may still be dropped
        kept = False
        async for event in events:
            if not isinstance(event, AudioFrame):
                continue
            await listener.hear(event)
            if kept:
                yield event
            else:
                held.append(event)
                if not decision.have_voice:
                    held = _pre_roll(held, self.profile.pre_speech_frames)
                    continue
                if not self._long_enough(held):
                    if decision.voice_stop:  # too short to recognise: dropped, and listening goes on
                        listener.clear()
                        held = []
                    continue
                kept = True
                yield SpeechStart(offset_ms=decision.speech_start)
                for frame in held:
                    yield frame
                held = []
            if decision.voice_stop:
                yield SpeechEnd(offset_ms=decision.speech_end)
                return
        if decision.have_voice:
            # The input ran out before the silence closed the utterance: the end-point is the end of input.
            if not kept:
                yield SpeechStart(offset_ms=decision.speech_start)
                for frame in held:
                    yield frame
            yield SpeechEnd(offset_ms=decision.speech_end)
