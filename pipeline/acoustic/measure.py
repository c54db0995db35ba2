"""A recording's turns measured from its sound alone: where each question was played, where its speech
ended, and when the answer was first and last audible.

The only inputs are the recording and the questions the lab played (``questions.PlayedQuestion``); nothing the
run wrote beside the recording is read. Each occurrence of a question (``align``) starts a turn: its end
of speech is the clip's own (its truth's where it has one, else the run's VAD: ``questions``; the row's
``speech_end_from`` says which) from where the clip was found; the answer is looked for from
there until the next question's first sound (or the recording's end), on the speaker channel when there is
one (``onset.clean_span``) and on the room microphone when there is not (``onset.room_span``). A turn
that cannot be measured is a failed row naming the file; a file that cannot be read is one failed row;
neither stops the other turns or files.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from pipeline.acoustic.align import Occurrence, find_occurrences, speech_end_sample
from pipeline.acoustic.onset import Span, clean_span, noise_floor, room_span
from pipeline.acoustic.questions import PlayedQuestion
from pipeline.acoustic.recording import AUDIBLE, Layout, Recording, RecordingError, read_recording
from pipeline.records.acoustic import MEASURED_BY, AcousticRow, failed_row


def measure_recording(
    path: Path, questions: Sequence[PlayedQuestion], layout: Layout = "stereo", device: str | None = None
) -> list[AcousticRow]:
    """One row per turn found in the recording at ``path``; failures are rows, never exceptions."""
    name = device if device is not None else path.stem
    try:
        rows = measure(read_recording(path, layout), questions, name)
    except RecordingError as exc:
        rows = [failed_row(name, str(exc))]
    return [replace(row, recording=str(path)) for row in rows]


def measure(recording: Recording, questions: Sequence[PlayedQuestion], device: str) -> list[AcousticRow]:
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
    found = find_occurrences(recording.mic, recording.rate, questions)
    if not found:
        channel = "microphone channel" if recording.speaker is not None else "recording"
        return [
            failed_row(
                device, f"{path}: no question found in the {channel} (no speech, or not these questions)", note=note
            )
        ]
    floor = noise_floor(recording.mic, recording.rate) if recording.speaker is None else 0.0
    rounds: Counter[int] = Counter()
    rows = []
    for i, o in enumerate(found):
        rounds[o.question] += 1
        following = found[i + 1] if i + 1 < len(found) else None
        rows.append(_turn(recording, questions, o, following, rounds[o.question], device, floor))
    return rows


def _turn(
    recording: Recording,
    questions: Sequence[PlayedQuestion],
    o: Occurrence,
    following: Occurrence | None,
    round_no: int,
    device: str,
    floor: float,
) -> AcousticRow:
    q, rate, path = questions[o.question], recording.rate, recording.path
    end = (
        speech_end_sample(recording.mic, rate, q, o)
        if recording.speaker is not None
        else o.start + round(q.speech_end_s * rate)
    )
    if end > len(recording.mic):
        return failed_row(
            device,
            f"{path}: the recording ends at {recording.seconds:.3f} s, before question {q.question_id!r} "
            f"(round {round_no}) finished speaking ({end / rate:.3f} s)",
            q.question_id,
            round_no,
            recording.note,
            q.speech_end_from,
        )
    stop = len(recording.mic) if following is None else _first_sound(questions[following.question], following, rate)
    span = _answer(recording, end, stop, floor)
    if span is None:
        until = "the recording's end" if following is None else f"the next question at {stop / rate:.3f} s"
        return failed_row(
            device,
            f"{path}: no audible answer to question {q.question_id!r} (round {round_no}) between its end of "
            f"speech at {end / rate:.3f} s and {until}",
            q.question_id,
            round_no,
            recording.note,
            q.speech_end_from,
        )
    return AcousticRow(
        run_id="",
        device=device,
        question_id=q.question_id,
        round=round_no,
        speech_end_s=end / rate,
        first_audible_s=span.first / rate,
        last_audible_s=span.last / rate,
        first_audible_ms=(span.first - end) * 1000 / rate,
        whole_turn_ms=(span.last - end) * 1000 / rate,
        measured_by=MEASURED_BY,
        ok=True,
        error="",
        note=recording.note,
        speech_end_from=q.speech_end_from,
    )


def _answer(recording: Recording, begin: int, stop: int, floor: float) -> Span | None:
    if recording.speaker is not None:
        return clean_span(recording.speaker, begin, stop)
    return room_span(recording.mic, recording.rate, begin, stop, floor)


def _first_sound(q: PlayedQuestion, o: Occurrence, rate: int) -> int:
    """The recording sample where a question's clip first becomes audible: the previous answer ends before it."""
    loud = np.nonzero(np.abs(q.pcm) > AUDIBLE)[0]
    offset = int(loud[0]) if len(loud) else 0
    return o.start + round(offset * rate / q.sample_rate)
