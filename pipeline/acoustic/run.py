"""``python -m pipeline.acoustic run FIXTURES --play OUTPUT --record INPUT``: a real device, measured by ear.

A speaker (OUTPUT) says the wake word (``--wake-word``) and each question to a voice assistant on
the desk; a microphone (INPUT) records the room the whole time. After each question the run waits
for the answer: until the room has been quiet for ``--quiet`` seconds after sound came back, or
``--max-answer`` seconds. The recording (``room.wav``, mono, 16 kHz) is then measured as any
recording is (``pipeline.acoustic.measure``, layout mono): where each question was said is found
in it, not assumed, so the speaker's and the sound card's delays are not in the figures. Nothing is
installed on the device: it is heard over its own network and server.

Beside the recording, ``room.json`` keeps what the streams said: their devices and latencies, the
stream time and recording sample each sound was scheduled at, lost input, late output. A PulseAudio
sink or source is ALSA's ``pulse`` device with ``PULSE_SINK``/``PULSE_SOURCE`` naming it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.acoustic.measure import measure_recording
from pipeline.acoustic.questions import PlayedQuestion, load_questions
from pipeline.acoustic.recording import AUDIBLE
from pipeline.acoustic.sound import Pcm, Recorder, SoundError, Speaker
from pipeline.records.acoustic import write_rows
from pipeline.settings.config import ConfigError, load_config
from pipeline.settings.fixtures import FixtureError
from pipeline.settings.models import ModelError

RATE = 16000  # what the lab's questions are and what the recording is written at
WINDOW = RATE // 50  # the level is watched in 20 ms windows


@dataclass(frozen=True, slots=True)
class Waits:
    """How the run paces itself (seconds)."""

    lead: float = 1.0  # the room alone before the first sound: its noise floor
    gap: float = 2.0  # after an answer (or the wake word's response), before the next sound
    quiet: float = 1.5  # this long quiet after sound came back ends an answer
    max_answer: float = 30.0  # from the end of a question: no answer by then, the run goes on


DEFAULT = Waits()


@dataclass(frozen=True, slots=True)
class Played:
    """One sound the run played: what, when on the stream's clock, and where the recording should hold it."""

    kind: str  # "wake" or "question"
    question_id: str
    stream_time: float
    sample: int  # by the streams' time info; the measurement finds it in the sound instead
    seconds: float


@dataclass(slots=True)
class Take:
    """A session's recording and what its streams said."""

    recording: Pcm
    played: list[Played] = field(default_factory=list)
    answered: list[bool] = field(default_factory=list)  # per question: sound came back before max_answer
    streams: dict[str, Any] = field(default_factory=dict)


class Session:
    """One speaker, one microphone, the room between them: plays clips and waits for the room's answers."""

    def __init__(self, speaker: Speaker, recorder: Recorder, waits: Waits) -> None:
        self.speaker, self.recorder, self.waits = speaker, recorder, waits
        self.lane = speaker.lane("voice")
        self.played: list[Played] = []
        self.threshold = AUDIBLE

    def measure_floor(self) -> None:
        """Listens to the room for ``lead`` seconds: sound is what rises above twice its loudest."""
        start = self.recorder.count
        self.pause(self.waits.lead)
        room = self.recorder.samples(start)
        self.threshold = max(AUDIBLE, 2 * float(np.max(np.abs(room)))) if len(room) else AUDIBLE

    def say(self, kind: str, question_id: str, pcm: Pcm) -> int:
        """Plays ``pcm`` and returns once it has played: the recording's sample where it ended."""
        start = self.lane.write(pcm)
        seconds = len(pcm) / RATE
        sample = self.recorder.index_of(start)
        self.played.append(Played(kind, question_id, start, sample, seconds))
        while self.speaker.now() < start + seconds:
            self.pause(0.02)
        return sample + len(pcm)

    def wait_answer(self, after: int) -> bool:
        """From sample ``after``: waits for sound, then for ``quiet`` seconds of quiet; False when no sound came
        within ``max_answer`` seconds."""
        heard, quiet_since = False, after
        deadline = time.monotonic() + self.waits.max_answer
        while time.monotonic() < deadline:
            self.pause(0.1)
            level = self._levels(after)
            loud = np.flatnonzero(level > self.threshold)
            if len(loud):
                heard, quiet_since = True, after + (int(loud[-1]) + 1) * WINDOW
            if heard and (self.recorder.count - quiet_since) / RATE >= self.waits.quiet:
                return True
        return heard

    def _levels(self, after: int) -> Pcm:
        x = self.recorder.samples(after)
        n = len(x) // WINDOW
        return np.abs(x[: n * WINDOW]).reshape(n, WINDOW).max(axis=1) if n else np.zeros(0, np.float32)

    def pause(self, seconds: float) -> None:
        time.sleep(seconds)


def take(
    questions: Sequence[tuple[str, Pcm]],
    play: str,
    record: str,
    waits: Waits,
    wake: Pcm | None = None,
) -> Take:
    """Plays the wake word (when given) and each question through ``play``, waiting for each answer, while
    ``record`` records the room; the whole recording and what the streams said."""
    with Recorder(record, RATE) as recorder, Speaker(play, RATE) as speaker:
        session = Session(speaker, recorder, waits)
        session.measure_floor()
        answered = []
        for question_id, pcm in questions:
            if wake is not None:
                session.wait_answer(session.say("wake", "wake-word", wake))
                session.pause(waits.gap)
            answered.append(session.wait_answer(session.say("question", question_id, pcm)))
            session.pause(waits.gap)
        streams = {
            "record": dataclasses.asdict(recorder.info),
            "play": dataclasses.asdict(speaker.info),
            "play_delay_s": speaker.delay_s,
            "input_overflows": recorder.overflows,
            "input_lost_s": recorder.gaps_s,
            "output_underflows": speaker.underflows,
            "output_late": speaker.late,
            "threshold": session.threshold,
        }
        recording = recorder.samples()
    return Take(recording, session.played, answered, streams)


def speech_end(pcm: Pcm) -> float:
    """A wake word's end: its last audible sample (seconds); a clip without one ends at its end."""
    loud = np.flatnonzero(np.abs(pcm) > AUDIBLE)
    return (int(loud[-1]) + 1) / RATE if len(loud) else len(pcm) / RATE


def read_wake(path: Path) -> Pcm:
    """The wake word's audio as the run plays it (16 kHz mono); a clear error naming the file."""
    from pipeline.settings.audio import BadAudio, load_audio

    try:
        frames = load_audio(path).frames
    except BadAudio as exc:
        raise SoundError(f"--wake-word {path}: {exc}") from None
    return np.frombuffer(b"".join(f.pcm for f in frames), "<i2").astype(np.float32) / 32768.0


def write_take(out: Path, result: Take) -> Path:
    """``room.wav`` (mono 16-bit 16 kHz) and ``room.json`` beside it; the WAV's path."""
    import soundfile

    out.mkdir(parents=True, exist_ok=True)
    wav = out / "room.wav"
    soundfile.write(wav, np.clip(result.recording, -1.0, 1.0), RATE, subtype="PCM_16")
    said = {
        "sample_rate": RATE,
        "streams": result.streams,
        "played": [dataclasses.asdict(p) for p in result.played],
        "answered": result.answered,
    }
    (out / "room.json").write_text(json.dumps(said, indent=2) + "\n", encoding="utf-8")
    return wav


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipeline.acoustic run", description=__doc__.split("\n")[0])
    p.add_argument("fixtures", type=Path, help="the questions' folder (audio_fixtures/)")
    p.add_argument("--play", required=True, metavar="OUTPUT", help="the speaker: a PortAudio output (index or name)")
    p.add_argument("--record", required=True, metavar="INPUT", help="the microphone: a PortAudio input")
    p.add_argument("--wake-word", type=Path, metavar="WAV", help="said before each question (a cold turn each)")
    p.add_argument("--out", type=Path, default=Path("acoustic-run"), metavar="DIR", help="room.wav, room.json, rows")
    p.add_argument("--gap", type=float, default=DEFAULT.gap, metavar="S", help="after each answer, before the next")
    p.add_argument("--quiet", type=float, default=DEFAULT.quiet, metavar="S", help="this long quiet ends an answer")
    p.add_argument("--max-answer", type=float, default=DEFAULT.max_answer, metavar="S", help="longest wait for one")
    p.add_argument("--limit", type=int, metavar="N", help="the first N questions only")
    p.add_argument("--rounds", type=int, default=1, metavar="N", help="every question N times")
    p.add_argument("--device", default="device", help="the rows' device column")
    p.add_argument(
        "--config",
        type=Path,
        action="append",
        metavar="TOML",
        help="its VAD ends the speech of a question without a truth",
    )
    p.add_argument("--model-cache", type=Path, metavar="DIR", help="packaged models (default: the user's cache)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.rounds < 1 or (args.limit is not None and args.limit < 1):
        print("error: --rounds and --limit: 1 or more", file=sys.stderr)
        return 2
    try:
        questions = load(args)
        wake = read_wake(args.wake_word) if args.wake_word else None
        chosen = questions[: args.limit] * args.rounds
        waits = Waits(gap=args.gap, quiet=args.quiet, max_answer=args.max_answer)
        result = take([(q.question_id, q.pcm) for q in chosen], args.play, args.record, waits, wake)
    except (SoundError, ValueError, ConfigError, FixtureError, ModelError) as exc:  # QuestionError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    wav = write_take(args.out, result)
    print(f"recorded {len(result.recording) / RATE:.1f} s of the room: {wav}")
    return report(wav, args, questions[: args.limit], wake)


def load(args: argparse.Namespace) -> list[PlayedQuestion]:
    """The questions as the acoustic measurement takes them (with their ends of speech: a question's truth, else
    the run's VAD's)."""
    cfg = load_config(args.config) if args.config else None
    return load_questions(args.fixtures, cfg, args.model_cache)


def order(questions: int, rounds: int, wake: bool) -> list[int]:
    """What ``take`` plays, as indices into the questions (the wake word, when there is one, after them): each
    question ``rounds`` times in turn, each after the wake word."""
    per_question = [[questions, q] if wake else [q] for q in range(questions)]
    return [index for _ in range(rounds) for pair in per_question for index in pair]


def report(wav: Path, args: argparse.Namespace, questions: list[PlayedQuestion], wake: Pcm | None) -> int:
    """Measures the recording for the questions played, in the order played (the others are not looked for: a
    clip never played cannot be found by mistake; the wake word is one more clip, which bounds the turn before
    it): every sound played is one row, one not found a failed row."""
    played = list(questions)
    if wake is not None:
        played.append(PlayedQuestion("wake-word", wake, RATE, speech_end(wake)))
    rows = measure_recording(
        wav, played, layout="mono", device=args.device, schedule=order(len(questions), args.rounds, wake is not None)
    )
    out = args.out / "rows.csv"
    write_rows(out, rows)
    for r in rows:
        said = f"{r.first_audible_ms:.0f} ms silence" if r.ok else f"not measured: {r.error}"
        print(f"  {r.question_id} round {r.round}: {said}")
    failed = [r for r in rows if not r.ok]
    print(f"{out}: {len(rows)} rows, {len(rows) - len(failed)} turns measured, {len(failed)} failed")
    return 1 if failed else 0
