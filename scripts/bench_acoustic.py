"""What the recording says against what the traces say (issue 33), three ways, in one run, printed per condition.

    python scripts/bench_acoustic.py [--questions N] [--rounds R] [--tts espeak|stub] [--out DIR]

1. **emulator**: ``pipeline.serve`` (the simulator's stages, the answers spoken by ``--tts``) and an emulated
   device (``pipeline.replay --server URL --record-audio DIR``) asking the first N questions of each
   language R times. Its stereo recording (microphone left, speaker right, on its own clock) is measured
   from the sound alone (``pipeline.acoustic``, layout stereo) and each turn compared with the traces'
   ``first_audible_ms`` (the silence) and ``last_audible_ms`` (end of speech -> last audible sample).
   Goal: within 5 ms on every turn.
2. **room**: the same recording heard by one microphone in a simulated room (``pipeline.acoustic.room``:
   image-source room impulse responses, noise at 20 dB SNR, a sound-card latency of 40-150 ms drawn by
   the seed and not told to the measurement), measured as a single microphone (layout mono). Goal: 20 ms.
3. **sound server**: a private PulseAudio daemon's null sink (``pipeline.acoustic.sound_server``); the
   emulated device voices each question and plays each answer into it (``replay --voice --speaker``)
   while this process records the sink's monitor through PortAudio; the room recording measured (mono)
   against that run's traces. Goal: 20 ms. Left out, with the reason, where pulseaudio or PortAudio is
   missing.

Per condition: the turns compared, the difference (acoustic - trace) median and worst for the silence
and for the last audible sample, how many are within the goal, and each turn beyond it. Wall-clock
figures: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile

from labtools.transport_skews import start_serve, stop_serve
from pipeline import replay
from pipeline.acoustic.measure import measure_recording
from pipeline.acoustic.questions import PlayedQuestion, load_questions
from pipeline.acoustic.room import render_room
from pipeline.records.acoustic import AcousticRow
from pipeline.settings.config import load_config

ROOT = Path(__file__).resolve().parent.parent

FIXTURES = ROOT / "audio_fixtures"
SIMULATOR = ROOT / "configs" / "simulator.toml"
ESPEAK = '[tts]\nimpl = "espeak"\nwords_per_minute = 160\n'  # real speech answers: onsets as a voice has them
GOALS_MS = {"emulator": 5.0, "room": 20.0, "sound server": 20.0}


@dataclass(frozen=True, slots=True)
class Pair:
    """One turn seen both ways."""

    question_id: str
    round: int
    silence_trace: float
    silence_sound: float
    last_trace: float | None
    last_sound: float | None


def subset(out: Path, limit: int) -> Path:
    """A fixtures folder of the first ``limit`` questions of each language (the manifest's rows, the audio
    linked), in the manifest's order."""
    folder = out / "fixtures"
    folder.mkdir(parents=True, exist_ok=True)
    with (FIXTURES / "manifest.csv").open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        fields, rows = list(reader.fieldnames or []), list(reader)
    counts: dict[str, int] = defaultdict(int)
    kept = []
    for row in rows:
        if counts[row["language"]] < limit:
            counts[row["language"]] += 1
            kept.append(row)
            audio = row.get("audio") or f"{row['id']}.wav"
            link = folder / audio
            if not link.exists():
                link.symlink_to(FIXTURES / audio)
    with (folder / "manifest.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(kept)
    return folder


def configs(out: Path, tts: str) -> list[str]:
    """The simulator's stages, the answers by ``tts``."""
    if tts == "stub":
        return ["--config", str(SIMULATOR)]
    overlay = out / "espeak.toml"
    overlay.write_text(ESPEAK, encoding="utf-8")
    return ["--config", str(SIMULATOR), "--config", str(overlay)]


def run_device(out: Path, cfg: list[str], fixtures: Path, rounds: int, extra: list[str]) -> Path:
    """One emulated device against a fresh ``pipeline.serve``; its rows' folder."""
    server, url = start_serve([str(fixtures), *cfg], out / "server", sys.stderr)
    argv = [str(fixtures), *cfg, "--rounds", str(rounds), "--quiet"]
    try:
        code = replay.main([*argv, "--server", url, "--out", str(out / "device"), *extra], env={})
    finally:
        stop_serve(server)
    if code:
        raise SystemExit(f"the replay failed (exit {code}); see {out}")
    return out / "device"


def traced(folder: Path) -> dict[str, list[dict[str, str]]]:
    """The device's successful rows, by question, in round order."""
    by: dict[str, list[dict[str, str]]] = defaultdict(list)
    with (folder / "bench.csv").open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            if row.get("ok", "").lower() in ("true", "1") and row.get("first_audible_ms"):
                by[row["question_id"]].append(row)
    for rows in by.values():
        rows.sort(key=lambda r: int(r["round"]))
    return by


def pairs(trace: dict[str, list[dict[str, str]]], sound: Sequence[AcousticRow]) -> tuple[list[Pair], list[str]]:
    """Each question's n-th traced turn with its n-th occurrence in the recording; what could not be paired."""
    heard: dict[str, list[AcousticRow]] = defaultdict(list)
    unpaired = []
    for measured in sound:
        if measured.ok and measured.first_audible_ms is not None:
            heard[measured.question_id].append(measured)
        else:
            unpaired.append(f"recording: {measured.question_id or '-'} round {measured.round}: {measured.error}")
    out = []
    for qid, rows in trace.items():
        found = sorted(heard.get(qid, []), key=lambda r: r.round or 0)
        for n, row in enumerate(rows):
            if n >= len(found):
                unpaired.append(f"traces: {qid} round {row['round']} not found in the recording")
                continue
            a = found[n]
            last = row.get("last_audible_ms")
            out.append(
                Pair(
                    qid,
                    int(row["round"]),
                    float(row["first_audible_ms"]),
                    float(a.first_audible_ms),  # type: ignore[arg-type]
                    float(last) if last else None,
                    a.whole_turn_ms,
                )
            )
    return out, unpaired


def report(name: str, found: list[Pair], unpaired: list[str]) -> bool:
    """Print one condition's comparison; whether every turn met the goal."""
    goal = GOALS_MS[name]
    print(f"\n== {name}: {len(found)} turn(s) compared, goal |acoustic - trace| <= {goal:g} ms")
    met = bool(found)
    for label, diffs in (
        ("silence (first audible)", [p.silence_sound - p.silence_trace for p in found]),
        (
            "last audible",
            [p.last_sound - p.last_trace for p in found if p.last_sound is not None and p.last_trace is not None],
        ),
    ):
        if not diffs:
            print(f"  {label}: none")
            continue
        worst = max(diffs, key=abs)
        within = sum(abs(d) <= goal for d in diffs)
        print(
            f"  {label}: median {statistics.median(diffs):+.2f} ms, worst {worst:+.2f} ms, "
            f"{within}/{len(diffs)} within the goal"
        )
        met = met and (label.startswith("last") or within == len(diffs))
    for p in found:
        d = p.silence_sound - p.silence_trace
        if abs(d) > goal:
            print(
                f"  beyond: {p.question_id} round {p.round}: silence trace {p.silence_trace:.1f}, sound "
                f"{p.silence_sound:.1f} ({d:+.1f} ms)"
            )
    for line in unpaired:
        print(f"  unpaired: {line}")
    return met


def emulator_and_room(out: Path, cfg: list[str], fixtures: Path, rounds: int, played: list[PlayedQuestion]) -> bool:
    device = run_device(out / "emulator", cfg, fixtures, rounds, ["--record-audio", str(out / "emulator" / "rec")])
    trace = traced(device)
    wav = out / "emulator" / "rec" / "0.wav"
    ok = report("emulator", *pairs(trace, measure_recording(wav, played, layout="stereo")))
    stereo, rate = soundfile.read(wav, dtype="float64", always_2d=True)
    rendered = render_room(stereo, rate, seed=33)
    room = out / "room.wav"
    soundfile.write(room, np.clip(rendered.mic, -1.0, 1.0), rate, subtype="PCM_16")
    print(
        f"\n(room: latency {rendered.latency * 1000 / rate:.1f} ms, the answers' direct path "
        f"{rendered.device_delay * 1000 / rate:.1f} ms, the questions' {rendered.person_delay * 1000 / rate:.1f} ms)"
    )
    return report("room", *pairs(trace, measure_recording(room, played, layout="mono"))) and ok


def sound_server(out: Path, cfg: list[str], fixtures: Path, played: list[PlayedQuestion]) -> bool | None:
    """Condition 3; None when this machine has no sound server to run."""
    try:
        from pipeline.acoustic.sound import Recorder
        from pipeline.acoustic.sound_server import PulseServer
    except (ImportError, OSError) as exc:
        print(f"\n== sound server: left out ({exc})")
        return None
    folder = out / "sound"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        pulse = PulseServer(folder / "pulse")
        with pulse as server:
            os.environ.update(server.env)  # this process's streams and the replay's reach the daemon
            with Recorder("pulse") as room:
                device = run_device(folder, cfg, fixtures, 2, ["--speaker", "pulse", "--voice", "pulse"])
                heard = room.samples()
    except (OSError, RuntimeError) as exc:
        print(f"\n== sound server: left out ({exc})")
        return None
    wav = folder / "room.wav"
    soundfile.write(wav, heard, 16000, subtype="PCM_16")
    return report("sound server", *pairs(traced(device), measure_recording(wav, played, layout="mono")))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=8, help="questions of each language")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the emulator's own recording")
    p.add_argument("--tts", choices=("espeak", "stub"), default="espeak", help="what speaks the answers")
    p.add_argument("--out", type=Path, help="keep the recordings and runs here (default: a temporary folder)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        cfg = configs(out, args.tts)
        fixtures = subset(out, args.questions)
        played = load_questions(fixtures, load_config([Path(c) for c in cfg[1::2]]))
        names = ", ".join(q.question_id for q in played)
        print(f"questions: {names}; answers by {args.tts}; rows and recordings under {out}")
        ok = emulator_and_room(out, cfg, fixtures, args.rounds, played)
        sound = sound_server(out, cfg, fixtures, played)
    print("\nall conditions within their goals" if ok and sound is not False else "\nsome turns beyond their goal")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
