"""A turn's end-point scored against the truth of its question, from the spans alone.

A question that carries a truth (``truth.csv``: where its user really finished, and where they paused) is
traced with that truth and the moment its last speech reached the server (the turn span's
``true_speech_end`` event: in a turn that ended before then, the microphone's schedule; a device's: the moment
its microphone captured it), and its VAD span says at what
point of the audio the end-point was declared (``lab.vad.declared_at_ms``). From those:

- ``cut_off``: 1 when the end was declared before the user finished (the audio in hand at the declaration
  ends before the question's last speech sample): the pipeline answered part of a question, inside a pause.
  ``cut_off_by`` says how it was seen: ``declared``, from the VAD span that declared the end (in one process, or
  a device's turn read beside its server's traces); ``stt``, a device alone (a server that writes no spans of
  ours, such as the real xiaozhi-esp32-server), inferred from the server's recognised-text messages: the first
  came before the user finished (a server recognises text only once it has declared an end), or more than one
  came (it heard the question as several utterances) (``seen_by_device``). The inference can miss a cut (a
  short pause whose recognition lands after the true end, the second utterance's ``stt`` after the answer
  ended), and take an earlier exchange's late text for this question's: a server answering the second half
  of a question it cut off after the device's turn ended answers into the next turn, unless the device waits
  for a quiet server before each question (``pipeline.replay --settle-ms``);
- ``utterances``: how many utterances the run's end-of-turn detector makes of the whole question, heard alone
  and untimed (1: it held the question together); empty where the cut was seen in ``stt`` (the detector is the
  server's, unseen);
- ``endpoint_delay_ms``: the true end of speech -> the end-point declared (negative when cut off);
- the silence from the true end of speech: to the first audio played (in-process) or to the answer's first
  audible sample (a device), beside the same figures from the end the pipeline itself chose.

A question without a truth gives every one of these empty, never zero.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.analysis.numbers import ms
from pipeline.analysis.traces import ReadSpan, attr_number
from pipeline.analysis.turns import TurnSpans
from pipeline.tracing import names


@dataclass(frozen=True, slots=True)
class EndpointTruth:
    """The truth columns of one turn's row (``TurnRow``'s of the same names)."""

    cut_off: int | None = None
    cut_off_by: str | None = None  # "declared" or "stt" (see the module's docstring)
    utterances: int | None = None
    endpoint_delay_ms: float | None = None
    true_end_first_audio_ms: float | None = None
    true_end_first_audible_ms: float | None = None


NO_TRUTH = EndpointTruth()
DECLARED, SEEN_IN_STT = "declared", "stt"  # how a cut was seen (``cut_off_by``)


def _vad(t: TurnSpans, server: TurnSpans | None) -> ReadSpan | None:
    """The VAD span that declared the end-point: the turn's own, or (a device's turn, whose own VAD span only
    marks the frames it sent) its server's, read beside it."""
    for turn in (t, server):
        found = turn.first(names.VAD) if turn is not None else None
        if found is not None and found.attributes.get(names.DECLARED_AT_MS) is not None:
            return found
    return None


def endpoint_truth(t: TurnSpans, server: TurnSpans | None = None) -> EndpointTruth:
    """The turn's end-point against its question's truth; ``NO_TRUTH`` for a question that has none."""
    a = t.turn.attributes
    true_end_ms = attr_number(a.get(names.TRUTH_SPEECH_END_MS))
    if true_end_ms is None:
        return NO_TRUTH
    true_end = t.turn.event_ns(names.EV_TRUE_SPEECH_END)  # None: the turn failed before any audio came
    vad = _vad(t, server)
    declared = vad if vad is not None and vad.status_code != names.STATUS_ERROR else None
    declared_at = attr_number(declared.attributes.get(names.DECLARED_AT_MS)) if declared is not None else None
    playback = t.first(names.PLAYBACK)
    device = t.first(names.DEVICE)
    utterances = attr_number(a.get(names.TRUTH_UTTERANCES))
    cut_off, cut_off_by = (None, None) if declared_at is None else (int(declared_at < true_end_ms), DECLARED)
    if cut_off is None and device is not None:
        cut_off = seen_by_device(device, true_end)
        cut_off_by = None if cut_off is None else SEEN_IN_STT
        utterances = None  # the device's own VAD is not the detector that ended the turn: its server's is
    return EndpointTruth(
        cut_off=cut_off,
        cut_off_by=cut_off_by,
        utterances=None if utterances is None else int(utterances),
        endpoint_delay_ms=ms(true_end, declared.end_ns) if declared is not None and declared_at is not None else None,
        true_end_first_audio_ms=ms(true_end, playback.start_ns) if playback is not None and device is None else None,
        true_end_first_audible_ms=ms(true_end, device.event_ns(names.EV_FIRST_AUDIBLE)) if device else None,
    )


def seen_by_device(device: ReadSpan, true_end_ns: int | None) -> int | None:
    """A device's own view of a cut (its server's end-point unseen): 1 where the server's first recognised text
    came before the user finished, or more than one came; None where none came (nothing to judge by). Text
    in a turn that never reached the true end (``true_end_ns`` None: it ended, answered, before the question's
    last speech was sent) came before the user finished."""
    heard = sorted(e.time_ns for e in device.events if e.name == names.EV_STT_MESSAGE)
    last = device.event_ns(names.EV_STT)
    heard = heard or ([last] if last is not None else [])
    if not heard:
        return None
    return int(true_end_ns is None or heard[0] < true_end_ns or len(heard) > 1)


def decisions(vad: ReadSpan | None) -> tuple[int | None, float | None]:
    """The end-of-turn decisions a VAD span records, and the CPU they took, summed (ms): (None, None) where it
    records none; the CPU None where no decision carries one."""
    made = [e for e in vad.events if e.name == names.EV_VAD_DECISION] if vad is not None else []
    if not made:
        return None, None
    cpu = [c for e in made if (c := attr_number(e.attributes.get(names.DECISION_CPU_MS))) is not None]
    return len(made), (round(sum(cpu), 3) if cpu else None)
