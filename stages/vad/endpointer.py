"""End-pointing VAD over 60 ms frames, with a pluggable per-frame speech classifier (silero, energy).

The classifier says how likely a frame is speech; the end-pointer turns that
into speech start and end. Speech starts after ``min_speech_ms`` of speech and
ends after ``silence_ms`` of non-speech (the end-point delay, METHOD M4);
hysteresis keeps a word's quiet tail inside the utterance.

Two additions, both optional, leave that rule as it is:

- A classifier that meters its own CPU (``MeteredClassifier``: TEN) gets its end-point recorded as a
  ``VadDecision`` just before ``SpeechEnd``, with the CPU of every frame it classified, summed.
- A ``PauseJudge`` stacked on the VAD (Smart Turn) is asked at each pause of ``silence_ms`` whether the
  turn is finished: "finished" ends it, "wait" keeps listening (speech that resumes continues the same
  utterance, and its next pause is judged again) until the pause reaches the judge's ``max_silence_ms``.
  Every verdict is recorded as it is made.

CPU is read from the thread's own CPU clock (``pipeline.events.thread_cpu_ns``), never the wall clock: a
stage may know what it spent, never when.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from pipeline.events import (
    VERDICT_END,
    VERDICT_END_OF_INPUT,
    VERDICT_FINISHED,
    VERDICT_MAX_SILENCE,
    AudioFrame,
    Event,
    SpeechEnd,
    SpeechStart,
    StageInfo,
    VadDecision,
)
from stages.registry import ConfigError, require_positive

HYSTERESIS = 0.15


class FrameClassifier(Protocol):
    """What ``FrameVad`` needs of a classifier: how likely each frame is speech, and a fresh start each turn."""

    name: str

    def reset(self) -> None:
        """Forget everything heard: a new turn starts."""

    async def speech_probability(self, pcm: bytes) -> float:
        """How likely this frame is speech; awaited, so that a model may batch the frames of many streams."""


@runtime_checkable
class MeteredClassifier(FrameClassifier, Protocol):
    """A classifier that counts what its own classifying cost since ``reset``: one that never lets go of its
    thread while it classifies (no batching with other streams), so its thread's CPU clock read around the
    work is the work's alone."""

    cpu_ns: int  # CPU its thread spent classifying
    frames: int  # frames classified


class PauseJudge(Protocol):
    """An end-of-turn judge stacked on ``FrameVad`` (Smart Turn): it hears every frame, and at each pause of the
    VAD's ``silence_ms`` says whether the turn is finished. It names the stage it makes and adds its settings to
    the stage's record."""

    name: str
    attributes: tuple[tuple[str, str | int | float | bool], ...]
    max_silence_ms: int  # after a "wait", a pause this long (since the speech ended) ends the turn all the same

    def reset(self) -> None:
        """Forget everything heard: a new turn starts."""

    def hear(self, pcm: bytes) -> None:
        """One frame of the turn's audio, every frame in order, speech or not."""

    async def judge(self, speech_start_ms: int, speech_end_ms: int, at_ms: int) -> VadDecision:
        """The verdict (``VERDICT_FINISHED`` or ``VERDICT_WAIT``) on the turn heard so far, asked ``at_ms`` into the
        audio: its speech began at ``speech_start_ms`` and has paused since ``speech_end_ms``."""


def check_end_pointing(threshold: float, silence_ms: int, min_speech_ms: int) -> None:
    """Refuses end-pointing settings ``FrameVad`` cannot run with, naming the ``[vad]`` key."""
    if not 0 < threshold < 1:
        raise ConfigError(f"[vad] threshold = {threshold}: a speech probability between 0 and 1")
    require_positive("vad", silence_ms=silence_ms, min_speech_ms=min_speech_ms)


class FrameVad:
    """The VAD stage over a ``FrameClassifier``: frames in, ``SpeechStart``, the utterance's frames and
    ``SpeechEnd`` out; frames before speech is confirmed are held and passed on with its start. With a ``judge``,
    a pause ends the utterance only when the judge says so (or when it outlasts the judge's patience)."""

    def __init__(
        self,
        classifier: FrameClassifier,
        silence_ms: int = 600,
        min_speech_ms: int = 120,
        threshold: float = 0.5,
        profile: str = "",
        judge: PauseJudge | None = None,
    ) -> None:
        if silence_ms <= 0 or min_speech_ms <= 0:
            raise ValueError("silence_ms and min_speech_ms must be positive")
        self.classifier = classifier
        self.silence_ms = silence_ms
        self.min_speech_ms = min_speech_ms
        self.threshold = threshold
        self.judge = judge
        self.info = StageInfo(
            role="vad",
            impl=judge.name if judge else classifier.name,
            attributes=(
                *((("vad.profile", profile),) if profile else ()),  # only a classifier with profiles names one
                *((("vad.inner", classifier.name),) if judge else ()),  # the VAD the judge is stacked on
                ("vad.silence_ms", silence_ms),
                ("vad.threshold", threshold),
                *(judge.attributes if judge else ()),
            ),
        )

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        self.classifier.reset()
        if self.judge is not None:
            self.judge.reset()
        offset = 0  # audio time at the start of the current frame
        voiced_run = 0  # consecutive speech before speech is confirmed
        pending: list[AudioFrame] = []
        in_speech = False
        speech_start = speech_end = 0
        silence = 0
        waiting = False  # the judge said "wait" at this pause
        async for event in events:
            if not isinstance(event, AudioFrame):
                continue
            p = await self.classifier.speech_probability(event.pcm)
            if self.judge is not None:
                self.judge.hear(event.pcm)
            frame_end = offset + event.duration_ms
            if not in_speech:
                pending = [*pending, event][-(self.min_speech_ms // event.duration_ms + 1) :]
                voiced_run = voiced_run + event.duration_ms if p >= self.threshold else 0
                if voiced_run >= self.min_speech_ms:
                    in_speech = True
                    speech_start, speech_end = frame_end - voiced_run, frame_end
                    yield SpeechStart(offset_ms=speech_start)
                    for frame in pending:
                        yield frame
                    pending = []
            else:
                yield event
                if p >= self.threshold - HYSTERESIS:
                    speech_end = frame_end
                    silence = 0
                    waiting = False
                else:
                    silence += event.duration_ms
                    decision, over = await self._at_pause(silence, waiting, speech_start, speech_end, frame_end)
                    if decision is not None:
                        yield decision
                    if over:
                        yield SpeechEnd(offset_ms=speech_end)
                        return
                    waiting = waiting or decision is not None
            offset = frame_end
        if in_speech:
            # The audio ran out before the silence window closed: the end-point is the end of input.
            if (record := self._record(VERDICT_END_OF_INPUT, speech_end, offset)) is not None:
                yield record
            yield SpeechEnd(offset_ms=speech_end)

    async def _at_pause(
        self, silence: int, waiting: bool, speech_start: int, speech_end: int, at_ms: int
    ) -> tuple[VadDecision | None, bool]:
        """What a pause of ``silence`` ms decides on the frame ending ``at_ms``: the decision to record (None: none
        made, or one a plain VAD does not record), and whether the utterance is over."""
        if self.judge is None:
            over = silence >= self.silence_ms
            return (self._record(VERDICT_END, speech_end, at_ms) if over else None), over
        if not waiting and silence >= self.silence_ms:
            decision = await self.judge.judge(speech_start, speech_end, at_ms)
            return decision, decision.verdict == VERDICT_FINISHED
        if waiting and silence >= self.judge.max_silence_ms:
            return VadDecision(VERDICT_MAX_SILENCE, at_ms, speech_end), True
        return None, False

    def _record(self, verdict: str, speech_end: int, at_ms: int) -> VadDecision | None:
        """The end-point as a decision, with the CPU of every frame classified, where the classifier meters it (or a
        judge's run, which records every ending); None for a plain VAD that cannot tell its CPU."""
        if self.judge is not None:
            return VadDecision(verdict, at_ms, speech_end)
        if isinstance(self.classifier, MeteredClassifier):
            return VadDecision(verdict, at_ms, speech_end, cpu_ns=self.classifier.cpu_ns, frames=self.classifier.frames)
        return None
