"""``pipeline.acoustic run`` through a real sound server: questions played into a PulseAudio null sink, the room
recorded from its monitor, and a fake voice assistant on the same sink that answers what it hears.

The fake hears through its own stream of the monitor, waits for a question to end (sound, then quiet),
and plays a tone a fixed time later. The run must have waited for each answer, and its recording
must hold each question where its streams said they played it, to the few milliseconds the
streams' time info is good for.
"""

from __future__ import annotations

import csv
import json
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile

from pipeline.acoustic import run
from pipeline.acoustic.questions import load_questions
from pipeline.acoustic.sound import Pcm, Recorder, SoundError, Speaker
from pipeline.acoustic.sound_server import PulseServer
from pipeline.settings.config import load_config
from tests.sound_server import pulse
from tests.transport.test_device_server_e2e import FIXTURES, SIMULATOR

pytestmark = [pytest.mark.sound, pytest.mark.realtime]
__all__ = ["pulse"]  # the fixture, used by name

RATE = run.RATE
TONE = (0.3 * np.sin(np.arange(RATE // 2) * 2 * np.pi * 330 / RATE)).astype(np.float32)


def burst(seconds: float, seed: int) -> Pcm:
    """A question stand-in: noise, as distinct from the answer's tone."""
    return (0.2 * np.random.default_rng(seed).standard_normal(round(seconds * RATE))).astype(np.float32)


class FakeAssistant:
    """Answers each thing it hears with ``TONE``, ``after`` seconds past the end of what it heard (``after``
    must leave it time to hear the quiet: ``quiet`` and the monitor's delivery, about 0.2 s here)."""

    def __init__(self, after: float = 0.9, quiet: float = 0.3) -> None:
        self.after, self.quiet = after, quiet
        self.answers: list[float] = []  # stream times its answers were scheduled to start
        self.late = 0  # its answers that played later than scheduled
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FakeAssistant:
        self.ready = threading.Event()
        self.thread.start()
        assert self.ready.wait(10), "the fake assistant did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(10)
        assert not self.thread.is_alive()
        assert self.late == 0, "the fake answered later than it meant to: give it a longer `after`"

    def _run(self) -> None:
        with Recorder("pulse") as ear, Speaker("pulse") as mouth:
            voice = mouth.lane("assistant")
            self.ready.set()
            seen, busy_until = 0, 0.0
            while not self.stopping.wait(0.05):
                x = ear.samples(seen)
                loud = np.flatnonzero(np.abs(x) > 0.01)
                if mouth.now() < busy_until or not len(loud):
                    seen = ear.count if mouth.now() < busy_until else seen
                    continue
                if (len(x) - loud[-1]) / RATE >= self.quiet:  # heard something, now quiet: answer it
                    ended = ear.adc_time(seen + int(loud[-1]))
                    start = voice.write(TONE, at=ended + self.after - mouth.delay_s)
                    self.answers.append(start)
                    busy_until = start + len(TONE) / RATE + 0.3
                    seen = ear.count
            self.late = mouth.late


def found_at(recording: Pcm, clip: Pcm, near: int, reach: int = 1600) -> int:
    """Where ``clip`` is in ``recording`` within ``reach`` samples of ``near`` (cross-correlation)."""
    lo = max(0, near - reach)
    part = recording[lo : near + reach + len(clip)]
    scores = np.correlate(part, clip, mode="valid")
    return lo + int(np.argmax(scores))


def test_the_run_records_each_question_and_answer_where_its_streams_put_them(pulse: PulseServer) -> None:
    questions = [("q1", burst(0.8, 1)), ("q2", burst(0.5, 2))]
    waits = run.Waits(lead=0.3, gap=0.3, quiet=0.6, max_answer=5.0)
    with FakeAssistant() as fake:
        take = run.take(questions, "pulse", "pulse", waits)
    assert take.answered == [True, True]
    assert take.streams["input_lost_s"] == 0.0 and take.streams["output_late"] == 0
    assert [p.question_id for p in take.played] == ["q1", "q2"]
    for played, (_qid, pcm) in zip(take.played, questions, strict=True):
        # the streams' time info puts it within milliseconds of where the sound is (seen here: up to 2.8 ms)
        assert abs(found_at(take.recording, pcm, played.sample) - played.sample) <= 5 * RATE // 1000
    assert len(fake.answers) == 2


def test_an_output_that_does_not_exist_is_named(pulse: PulseServer) -> None:
    with pytest.raises(SoundError, match="no-such-speaker"):
        run.take([("q1", burst(0.2, 1))], "no-such-speaker", "pulse", run.Waits(lead=0.1))


def test_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert run.main([str(FIXTURES), "--play", "x", "--record", "y", "--rounds", "0"]) == 2
    assert "--rounds" in capsys.readouterr().err


def test_the_run_measures_a_fake_assistant_by_ear(pulse: PulseServer, tmp_path: Path) -> None:
    """The silence the run measures is the one the fake made: from the question's end of speech (where the
    streams played it, plus its speech end) to the stream time the fake scheduled its answer at."""
    argv = [str(FIXTURES), "--play", "pulse", "--record", "pulse", "--limit", "2", "--config", str(SIMULATOR)]
    argv += ["--out", str(tmp_path), "--gap", "0.3", "--quiet", "0.8", "--max-answer", "8"]
    with FakeAssistant(after=1.5, quiet=0.8) as fake:
        code = run.main(argv)
    assert code == 0
    said = json.loads((tmp_path / "room.json").read_text(encoding="utf-8"))
    ends = {q.question_id: q.speech_end_s for q in load_questions(FIXTURES, load_config([SIMULATOR]))}
    with (tmp_path / "rows.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["ok"].lower() for r in rows] == ["true", "true"] and len(fake.answers) == 2
    differences = []
    for row, played, answer in zip(rows, said["played"], fake.answers, strict=True):
        made = (answer - played["stream_time"] - ends[row["question_id"]]) * 1000
        differences.append(round(float(row["first_audible_ms"]) - made, 1))
    print(f"measured - made silence (ms): {differences}")
    assert all(abs(d) <= 20 for d in differences), differences


def test_a_wake_word_is_said_before_each_question_and_measured_apart(pulse: PulseServer, tmp_path: Path) -> None:
    wake = tmp_path / "wake.wav"
    soundfile.write(wake, burst(0.4, 7), RATE, subtype="PCM_16")
    argv = [str(FIXTURES), "--play", "pulse", "--record", "pulse", "--limit", "1", "--config", str(SIMULATOR)]
    argv += ["--out", str(tmp_path / "run"), "--gap", "0.3", "--quiet", "0.8", "--wake-word", str(wake)]
    with FakeAssistant(after=1.5, quiet=0.8) as fake:
        code = run.main(argv)
    said = json.loads((tmp_path / "run" / "room.json").read_text(encoding="utf-8"))
    assert [p["kind"] for p in said["played"]] == ["wake", "question"] and len(fake.answers) == 2
    with (tmp_path / "run" / "rows.csv").open(encoding="utf-8") as fh:
        rows = {r["question_id"]: r for r in csv.DictReader(fh)}
    assert code == 0, rows
    assert set(rows) == {"wake-word", said["played"][1]["question_id"]}


def test_the_order_measured_is_the_order_played() -> None:
    """``take`` plays each question in turn, after the wake word when there is one (index: after the questions)."""
    from pipeline.acoustic.run import order

    assert order(2, 2, wake=False) == [0, 1, 0, 1]
    assert order(2, 1, wake=True) == [2, 0, 2, 1]
