"""What a phone plays of a telephony bot's answer, and when: the playout buffer in front of the bot's media.

A bot on Twilio's wire (``wire.twilio``) sends its answer as media messages as fast as its speech is made,
faster than real time, and no message says where an answer begins or ends. A phone plays the audio in order at
8 kHz: a chunk that arrives while earlier audio still plays waits for it; one that arrives after the buffer ran
dry plays at once. So when a sample is heard depends on what came before it, not on its arrival alone, and an
answer's edges are inferred from the sound as played:

- its first audible sample: the first sample over the lab's audibility threshold (|x| > 64 of 16-bit,
  ``opus.AUDIBLE``), at the moment it plays;
- its end: the last audible sample followed by ``GAP_MS`` of played silence (or of nothing played): a pause that
  long ends an answer, a shorter one (between sentences) does not;
- a ``clear`` (the bot stops talking: it was interrupted) drops what is queued and not yet played, and the answer
  ends with the last audible sample played before it;
- a ``mark`` is echoed once the audio queued before it has played, or at once when a ``clear`` drops that audio
  (Twilio's rule).

Times are the injected clock's nanoseconds; a sample lasts ``NS_PER_SAMPLE`` at 8 kHz (125,000 ns, exact), and
at a chunk's own rate otherwise (a bot on Pipecat's wire sends 16 or 24 kHz: sample i of a chunk plays
i * 10^9 // rate ns after its first, to the nanosecond below). Every
edge found here is inferred from sound, not told by the protocol: the rows that use it say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipeline.transport.wire.g711 import SAMPLE_RATE
from pipeline.transport.wire.opus import AUDIBLE

NS_PER_SAMPLE = 1_000_000_000 // SAMPLE_RATE
GAP_MS = 700.0  # estimated: longer than a TTS's pause between sentences (200-500 ms), shorter than a turn's silence


@dataclass(slots=True)
class Chunk:
    """A media message as the phone plays it: when it arrived, when its first sample plays, how many samples play
    (fewer once a clear cut it), and which of them are audible (indices, ascending)."""

    arrived_ns: int
    start_ns: int
    samples: int
    loud: np.ndarray
    rate: int = SAMPLE_RATE

    @property
    def end_ns(self) -> int:
        return self.at(self.samples)

    def at(self, index: int) -> int:
        return self.start_ns + index * 1_000_000_000 // self.rate

    def index_at(self, t_ns: int, up: bool = False) -> int:
        """The sample that plays at ``t_ns`` (``up``: the first that plays at or after it)."""
        if up:
            return -(-(t_ns - self.start_ns) * self.rate // 1_000_000_000)
        return (t_ns - self.start_ns) * self.rate // 1_000_000_000

    def loud_from(self, index: int) -> int | None:
        """The first audible sample at or after ``index`` that plays; None when there is none."""
        i = int(np.searchsorted(self.loud, index))
        return int(self.loud[i]) if i < len(self.loud) and self.loud[i] < self.samples else None

    def last_loud(self) -> int | None:
        """The last audible sample that plays."""
        i = int(np.searchsorted(self.loud, self.samples))
        return int(self.loud[i - 1]) if i else None


@dataclass(frozen=True, slots=True)
class HeardAnswer:
    """An answer as the phone played it: its first and last audible sample (ns), whether it is over (``GAP_MS`` of
    silence has followed it, or a clear ended it) and whether a clear cut it; and of the media it was heard in
    (from the one holding its first audible sample to the one holding its last): when the first and the last
    arrived, when the first began to play, how many they are and how long they play."""

    first_ns: int
    last_ns: int
    over: bool
    cleared: bool
    received_first_ns: int = 0
    received_last_ns: int = 0
    started_ns: int = 0
    chunks: int = 0
    played_ns: int = 0
    last_end_ns: int = 0  # the end of its last audible sample (the next sample's start)


@dataclass(slots=True)
class Playout:
    """The phone's playout buffer: the bot's media in arrival order, each chunk where it plays; the bot's marks
    and when each is echoed."""

    gap_ms: float = GAP_MS
    chunks: list[Chunk] = field(default_factory=list)
    clears: list[int] = field(default_factory=list)  # when each clear arrived
    marks: list[tuple[str, int]] = field(default_factory=list)  # not yet echoed: name, when due
    free_ns: int = 0  # when what is queued has all played

    def media(self, at_ns: int, pcm: np.ndarray, rate: int = SAMPLE_RATE) -> Chunk:
        """Audio (16-bit linear, at ``rate``) that arrived at ``at_ns``: it plays when what was queued before it
        has."""
        loud = np.nonzero(np.abs(np.asarray(pcm, dtype=np.int32)) > AUDIBLE)[0]
        chunk = Chunk(at_ns, max(at_ns, self.free_ns), len(pcm), loud, rate)
        self.chunks.append(chunk)
        self.free_ns = chunk.end_ns
        return chunk

    def mark(self, at_ns: int, name: str) -> int:
        """A mark that arrived at ``at_ns``: it is due once the audio queued before it has played; when that is."""
        due = max(at_ns, self.free_ns)
        self.marks.append((name, due))
        return due

    def echoes(self, now_ns: int) -> list[tuple[str, int]]:
        """The marks due by ``now_ns``, in order, each with when it fell due; they are echoed once."""
        due = [m for m in self.marks if m[1] <= now_ns]
        self.marks = [m for m in self.marks if m[1] > now_ns]
        return due

    def clear(self, at_ns: int) -> None:
        """The bot cleared the buffer at ``at_ns``: what had not yet played never will, and a mark waiting for it
        is due now."""
        kept = []
        for chunk in self.chunks:
            if chunk.start_ns >= at_ns:
                chunk.samples = 0  # it never plays (whoever still holds it, a recording, sees so)
                continue
            chunk.samples = min(chunk.samples, chunk.index_at(at_ns))
            kept.append(chunk)
        self.chunks = kept
        self.clears.append(at_ns)
        self.free_ns = min(self.free_ns, at_ns)
        self.marks = [(name, min(due, at_ns)) for name, due in self.marks]

    def answer(self, after_ns: int, now_ns: int) -> HeardAnswer | None:
        """The first answer that plays from ``after_ns`` on, as far as ``now_ns`` tells; None while nothing
        audible has played by then."""
        gap = round(self.gap_ms * 1_000_000)
        first = last = last_end = None
        heard: list[Chunk] = []
        for chunk in self.chunks:
            begin = chunk.loud_from(max(0, chunk.index_at(after_ns, up=True)))
            if begin is None or chunk.at(begin) > now_ns:
                continue
            if last is not None and chunk.at(begin) - last >= gap:
                break  # a pause as long as the gap: the answer ended before this chunk
            first = chunk.at(begin) if first is None else first
            played = _played_by(chunk, begin, now_ns)
            last, last_end = chunk.at(played), chunk.at(played + 1)
            heard.append(chunk)
        if first is None or last is None or last_end is None:
            return None
        cleared = any(last < at <= last + gap for at in self.clears)
        return HeardAnswer(
            first,
            last,
            cleared or now_ns - last >= gap,
            cleared,
            received_first_ns=heard[0].arrived_ns,
            received_last_ns=heard[-1].arrived_ns,
            started_ns=heard[0].start_ns,
            chunks=len(heard),
            played_ns=sum(c.end_ns - c.start_ns for c in heard),
            last_end_ns=last_end,
        )

    def forget(self, before_ns: int) -> None:
        """Drop what had all played before ``before_ns`` (an earlier turn's answer): a call's buffer holds only
        what a turn still asks about, however long the call."""
        self.chunks = [c for c in self.chunks if c.end_ns > before_ns]
        self.clears = [at for at in self.clears if at > before_ns]

    def queued_ns(self, now_ns: int) -> int:
        """How much audio is queued and not yet played at ``now_ns``."""
        return max(0, self.free_ns - now_ns)


def _played_by(chunk: Chunk, begin: int, now_ns: int) -> int:
    """The last audible sample of ``chunk`` that plays, as far as ``now_ns`` (``begin``, audible, has played)."""
    index = chunk.last_loud()
    assert index is not None
    if chunk.at(index) <= now_ns:
        return index
    i = int(np.searchsorted(chunk.loud, chunk.index_at(now_ns), side="right"))
    return max(begin, int(chunk.loud[i - 1])) if i else begin
