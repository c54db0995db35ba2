"""A recording's turns measured from its sound alone: where each question was played, where its speech
ended, and when the answer was first and last audible.

The only inputs are the recording, the questions the lab played (``questions.PlayedQuestion``) and, where
known, the order it played them in (``schedule``: the replay's order, ``schedule.played_order``); nothing the
run wrote beside the recording is read. With the order, every question played is exactly one row: one
that cannot be found is a failed row with its best score, and the answer before it is looked for only up to
where it most likely was, its silence given and its end not (that cannot be told from the missed
question's); without the order, each question found (``align``) starts a turn and one not found is not
seen. A turn's end of speech is the clip's own (its truth's where it has one, else the run's VAD:
``questions``; the row's ``speech_end_from`` says which) from where the clip was found; the answer is looked
for from there until the next question's first sound (or the recording's end), on the speaker channel when
there is one (``onset.clean_span``), on the room microphone when there is not (``onset.room_span``, above
the noise and the question's own predicted tail: ``tail``), and by its waveform where the speaker's feed is
known (``feed``: the first and last audible sample from the feed, the rise above the noise from the room).
A turn that cannot be measured is a failed row naming the file; a file that cannot be read is one failed
row; neither stops the other turns or files.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from pipeline.acoustic.align import Missed, Occurrence, find_occurrences, find_played, speech_end_sample
from pipeline.acoustic.feed import HEARD_SCORE, Fed, answer_heard, feed_lag
from pipeline.acoustic.onset import Span, clean_span, noise_floor, room_span, without_rumble
from pipeline.acoustic.questions import PlayedQuestion
from pipeline.acoustic.recording import AUDIBLE, Layout, Recording, RecordingError, read_recording
from pipeline.acoustic.tail import Placed, question_sound, question_tail, room_decay
from pipeline.records.acoustic import MEASURED_BY, AcousticRow, failed_row

Found = Occurrence | Missed


def measure_recording(
    path: Path,
    questions: Sequence[PlayedQuestion],
    layout: Layout = "stereo",
    device: str | None = None,
    schedule: Sequence[int] | None = None,
) -> list[AcousticRow]:
    """One row per turn found in the recording at ``path`` (per question played, in ``schedule``'s order, where
    given: indices into ``questions``); failures are rows, never exceptions."""
    name = device if device is not None else path.stem
    try:
        rows = measure(read_recording(path, layout), questions, name, schedule)
    except RecordingError as exc:
        rows = [failed_row(name, str(exc))]
    return [replace(row, recording=str(path)) for row in rows]


def measure(
    recording: Recording, questions: Sequence[PlayedQuestion], device: str, schedule: Sequence[int] | None = None
) -> list[AcousticRow]:
    """The turns of a recording already read."""
    path, note = recording.path, recording.note
    if not questions:
        return [failed_row(device, f"{path}: no questions to look for", note=note)]
    shortest = min(q.speech_end_s for q in questions)
    if recording.seconds < shortest:
        return [
            failed_row(
                device,
                f"{path}: {recording.seconds:.3f} s long, shorter than any question's speech "
                f"(the shortest ends at {shortest:.3f} s)",
                note=note,
            )
        ]
    found: list[Found] = list(
        find_occurrences(recording.mic, recording.rate, questions)
        if schedule is None
        else find_played(recording.mic, recording.rate, questions, schedule)
    )
    if not found:
        channel = "recording" if recording.speaker is None and recording.feed is None else "microphone channel"
        return [
            failed_row(
                device, f"{path}: no question found in the {channel} (no speech, or not these questions)", note=note
            )
        ]
    turn = _Turn(recording, questions, device, found)
    rounds: Counter[int] = Counter()
    rows = []
    for i, o in enumerate(found):
        rounds[o.question] += 1
        rows.append(turn.missed(o, rounds[o.question]) if isinstance(o, Missed) else turn.row(i, rounds[o.question]))
    return rows


class _Turn:
    """One turn's measurement in a recording: what every turn of it shares."""

    def __init__(
        self, recording: Recording, questions: Sequence[PlayedQuestion], device: str, found: Sequence[Found]
    ) -> None:
        self.recording, self.questions, self.device, self.found = recording, questions, device, found
        rate = recording.rate
        self.floor, self.t60, self.room, high_passed = 0.0, 0.0, recording.mic, False
        if recording.speaker is None:  # a room: its noise and its decay, from the whole recording
            self.room, high_passed = without_rumble(recording.mic, rate)
        self.sounds = {}
        if recording.speaker is None:
            self.sounds = {
                i: question_sound(
                    self.room,
                    rate,
                    Placed(
                        questions[o.question],
                        o.start,
                        o.start + round(questions[o.question].speech_end_s * rate),
                        self.stop(i),
                        high_passed,
                    ),
                )
                for i, o in enumerate(found)
                if isinstance(o, Occurrence)
            }
            self.floor = noise_floor(self.room, rate)
            self.t60 = room_decay(list(self.sounds.values()), rate, self.floor)
        self.lag = None if recording.feed is None else feed_lag(recording.mic, recording.feed, rate)

    def stop(self, i: int) -> int:
        """Where the answer to the ``i``-th question found must have ended: the next question's first sound."""
        if i + 1 >= len(self.found):
            return len(self.recording.mic)
        following = self.found[i + 1]
        return _first_sound(self.questions[following.question], following, self.recording.rate)

    def failed(self, q: PlayedQuestion, round_no: int, error: str, note: str = "") -> AcousticRow:
        notes = "; ".join(n for n in (self.recording.note, note) if n)
        return failed_row(self.device, error, q.question_id, round_no, notes, q.speech_end_from)

    def missed(self, o: Missed, round_no: int) -> AcousticRow:
        q, rate = self.questions[o.question], self.recording.rate
        return self.failed(
            q,
            round_no,
            f"{self.recording.path}: question {q.question_id!r} (round {round_no}) was played but not found: its "
            f"best match scored {o.score:.2f} (a match in this recording needs {o.needed:.2f}), at "
            f"{max(o.start, 0) / rate:.3f} s",
        )

    def row(self, i: int, round_no: int) -> AcousticRow:
        o = self.found[i]
        assert isinstance(o, Occurrence)  # a Missed question is measure()'s missed row
        following = self.found[i + 1] if i + 1 < len(self.found) else None
        recording, q, rate, path = self.recording, self.questions[o.question], self.recording.rate, self.recording.path
        end = (
            speech_end_sample(recording.mic, rate, q, o)
            if recording.speaker is not None
            else o.start + round(q.speech_end_s * rate)
        )
        if end > len(recording.mic):
            return self.failed(
                q,
                round_no,
                f"{path}: the recording ends at {recording.seconds:.3f} s, before question {q.question_id!r} "
                f"(round {round_no}) finished speaking ({end / rate:.3f} s)",
            )
        stop = self.stop(i)
        bounded = _bounded_by(self.questions[following.question], following, rate) if following is not None else ""
        span = self._answer(i, end, stop)
        rise = None if span is None else span.rise
        if self.recording.feed is not None:
            fed = self._fed(q, round_no, end, stop)
            if isinstance(fed, str):
                return self.failed(q, round_no, fed, bounded)
            # the first and last audible sample from the feed; the rise above the noise the room's own (None
            # where the answer never rose out of it)
            span = Span(fed.first, fed.last, fed.first)
        if span is None:
            until = "the recording's end" if following is None else f"the next question at {stop / rate:.3f} s"
            return self.failed(
                q,
                round_no,
                f"{path}: no audible answer to question {q.question_id!r} (round {round_no}) between its end of "
                f"speech at {end / rate:.3f} s and {until}",
                bounded,
            )
        return AcousticRow(
            run_id="",
            device=self.device,
            question_id=q.question_id,
            round=round_no,
            speech_end_s=end / rate,
            first_audible_s=span.first / rate,
            last_audible_s=None if bounded else span.last / rate,
            first_audible_ms=(span.first - end) * 1000 / rate,
            whole_turn_ms=None if bounded else (span.last - end) * 1000 / rate,
            measured_by=MEASURED_BY,
            ok=True,
            error="",
            note="; ".join(n for n in (recording.note, bounded) if n),
            speech_end_from=q.speech_end_from,
            rise_ms=None if rise is None else (rise - end) * 1000 / rate,
        )

    def _fed(self, q: PlayedQuestion, round_no: int, begin: int, stop: int) -> Fed | str:
        """The answer the speaker's feed holds for this turn, found in the room; or why not."""
        recording, rate = self.recording, self.recording.rate
        assert recording.feed is not None
        turn = f"question {q.question_id!r} (round {round_no})"
        if self.lag is None:
            return f"{recording.path}: the speaker's feed (right channel) is silent: no answer to find in the room"
        heard = answer_heard(recording.mic, recording.feed, rate, self.lag, begin, stop)
        if heard is None:
            return (
                f"{recording.path}: the speaker's feed holds no answer to {turn} between its end of speech at "
                f"{begin / rate:.3f} s and {stop / rate:.3f} s (the room hears the feed "
                f"{self.lag / rate * 1000:+.1f} ms after it)"
            )
        if not isinstance(heard, Fed):
            return (
                f"{recording.path}: the answer to {turn} that the feed holds from {heard.fed_at / rate:.3f} s was not "
                f"heard in the room: its best match scored {heard.score:.3f} (needs {HEARD_SCORE:.3f}), near "
                f"{heard.near / rate:.3f} s"
            )
        return heard

    def _answer(self, i: int, begin: int, stop: int) -> Span | None:
        recording = self.recording
        if recording.speaker is not None:
            return clean_span(recording.speaker, begin, stop)
        tail = question_tail(self.sounds[i], recording.rate, self.floor, self.t60)
        return room_span(self.room, recording.rate, begin, stop, self.floor, tail)


def _bounded_by(q: PlayedQuestion, following: Found, rate: int) -> str:
    """The note of a turn whose next question was not found: its answer was looked for only up to where that
    question most likely began, and its end is not given (where this answer ended and that question began
    cannot be told apart: a figure there could run over the question and its answer)."""
    if not isinstance(following, Missed):
        return ""
    return (
        f"the answer looked for up to {max(following.start, 0) / rate:.3f} s, where the next question "
        f"({q.question_id!r}, not found) most likely began; its end not measured"
    )


def _first_sound(q: PlayedQuestion, o: Found, rate: int) -> int:
    """The recording sample where a question's clip first becomes audible: the previous answer ends before it."""
    loud = np.nonzero(np.abs(q.pcm) > AUDIBLE)[0]
    offset = int(loud[0]) if len(loud) else 0
    return max(0, o.start + round(offset * rate / q.sample_rate))
