"""What the recording says against what the traces say (issues 33 and 43), in one run, printed per condition.

    python scripts/bench_acoustic.py [--questions N] [--rounds R] [--tts espeak|stub] [--out DIR] [--from DIR]
        [--quick]

1. **emulator**: ``pipeline.serve`` (the simulator's stages, answers spoken by ``--tts``) and an emulated device
   (``pipeline.replay --record-audio``) asking the first N questions of each language R times (8 x 2 x 2: 32
   turns). Its stereo recording is measured from the sound alone (``pipeline.acoustic``, the replay's order) and
   each turn's silence and last audible sample compared with the traces'. Goal: within 0.1 ms on every turn.
2. **rooms**: that recording heard in simulated rooms (``pipeline.acoustic.room``: image sources to the order the
   RT60 needs, the RT60 measured on the room's own impulse response, a sound-card latency of 40-150 ms the
   measurement is not told), measured two ways: the room microphone alone (layout mono), and beside the speaker
   channel as recorded, on its own timeline (layout room-feed). The sweep: RT60 0.2-0.8 s x SNR 30 / 20 / 10 dB
   x 1.5 and 3 m (white noise, 16 kHz); pink noise; answers fading in over 300 ms; 8 and 48 kHz. A turn's truth
   is the stereo recording's own, carried into the room by where each source's direct sound lands. Goals (issue
   43): every turn found; the silence within 20 ms at P90 up to RT60 0.6 s at SNR 20 dB or more and 1.5 m, within
   50 ms up to RT60 0.8 s at 3 m and SNR 10 dB.
3. **sound server**: a private PulseAudio null sink (``pipeline.acoustic.sound_server``) the emulated device
   voices each question and plays each answer into while this process records its monitor; measured (mono)
   against that run's traces. Goal: 20 ms. Left out, with the reason, where pulseaudio or PortAudio is missing.

Per room: the RT60 asked and measured; for the microphone alone the turns found of those played, the silence's
error (acoustic - truth) as median, P90 and worst of its size, its signed median, the same for the rise above the
noise (``rise_ms``), the P90 against where the answer came out of the rest (the device's sound alone reaching the
power of the noise and what is left of the question in a 4 ms window: about the first a listener could hear), how
many answers began under the rest (more than 5 ms between the two) and whether the goal was met; the same first
five with the feed. ``--from DIR`` measures an earlier run's emulator folder instead of running the device again;
``--quick`` sweeps only the goals' corners.
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
import soxr

from labtools.acoustic_rooms import Room, sweep
from labtools.transport_skews import start_serve, stop_serve
from pipeline import replay
from pipeline.acoustic.measure import measure_recording
from pipeline.acoustic.questions import PlayedQuestion, load_questions
from pipeline.acoustic.room import render_room
from pipeline.acoustic.schedule import played_order
from pipeline.records.acoustic import AcousticRow
from pipeline.settings.config import load_config

ROOT = Path(__file__).resolve().parent.parent

FIXTURES = ROOT / "audio_fixtures"
SIMULATOR = ROOT / "configs" / "simulator.toml"
ESPEAK = '[tts]\nimpl = "espeak"\nwords_per_minute = 160\n'  # real speech answers: onsets as a voice has them
GOALS_MS = {"emulator": 0.1, "sound server": 20.0}
FADE_S = 0.3  # the soft onset: an answer fading in over this long
UNDER_MS = 5.0  # an answer began unheard: its sound came out of the rest this much after its first audible sample


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
    """Print one traced condition's comparison; whether every turn met the goal."""
    goal = GOALS_MS[name]
    print(f"\n== {name}: {len(found)} turn(s) compared, goal |acoustic - trace| <= {goal:g} ms")
    met = bool(found) and not unpaired
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
    for line in unpaired:
        print(f"  unpaired: {line}")
    return met


def room_table(
    stereo: np.ndarray, rate: int, played: list[PlayedQuestion], schedule: list[int], rooms: list[Room], out: Path
) -> bool:
    """Every room condition measured and printed as one table row; whether every goal was met."""
    print(f"\n== rooms: {len(schedule)} questions played per recording; error = acoustic - truth (ms)")
    print(
        "| condition | RT60 measured | found / played | median | P90 | worst | signed median | rise median "
        "| P90 from heard | began unheard | met | with the feed: found | median | P90 | worst | met | goal P90 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    met = True
    for n, room in enumerate(rooms):
        row = _room_row(stereo, rate, played, schedule, room, out / f"room-{n}.wav", seed=33 + n)
        print(row[0], flush=True)
        met = met and row[1]
    return met


def _room_row(
    stereo: np.ndarray, rate: int, played: list[PlayedQuestion], schedule: list[int], room: Room, wav: Path, seed: int
) -> tuple[str, bool]:
    source = _prepared(stereo, rate, room, played, schedule)
    truth_wav = wav.with_suffix(".stereo.wav")
    soundfile.write(truth_wav, source, room.rate, subtype="PCM_16")
    truth = {(r.question_id, r.round): r for r in measure_recording(truth_wav, played, "stereo", schedule=schedule)}
    rendered = render_room(
        source, room.rate, seed=seed, snr_db=room.snr_db, rt60=room.rt60, distance_m=room.distance_m, noise=room.noise
    )
    mic = np.clip(rendered.mic, -1.0, 1.0)
    soundfile.write(wav, mic, room.rate, subtype="PCM_16")
    feed = np.pad(source[: len(mic), 1], (0, max(0, len(mic) - len(source))))  # on its own timeline, not the room's
    soundfile.write(fed_wav := wav.with_suffix(".feed.wav"), np.stack([mic, feed], axis=1), room.rate, subtype="PCM_16")
    shift = (rendered.device_delay - rendered.person_delay) * 1000 / room.rate
    both = _silences(measure_recording(wav, played, "mono", schedule=schedule), truth, shift)
    errors = [e for e, _, _ in both]
    rises = [(r.rise_ms or 0.0) - (t.first_audible_ms or 0.0) - shift for _, r, t in both]
    fed_errors = [
        e for e, _, _ in _silences(measure_recording(fed_wav, played, "room-feed", schedule=schedule), truth, shift)
    ]
    beyond_heard, under = [], 0
    for _, r, t in both:
        at = round((t.first_audible_s or 0.0) * room.rate) + rendered.shift_of(1)
        heard = rendered.heard_from(at)
        if heard is not None and r.first_audible_s is not None:
            under += heard - at > round(UNDER_MS * room.rate / 1000)
            beyond_heard.append(abs(r.first_audible_s * room.rate - heard) * 1000 / room.rate)
    alone, alone_ok = _stats(errors, len(schedule), room.goal_ms)
    with_feed, feed_ok = _stats(fed_errors, len(schedule), room.goal_ms)
    cells = [
        room.label,
        f"{rendered.rt60:.2f} s",
        *alone[:4],
        f"{statistics.median(errors):+.1f}" if errors else "-",
        f"{statistics.median(rises):+.1f}" if rises else "-",
        f"{np.percentile(beyond_heard, 90):.1f}" if beyond_heard else "-",
        f"{under}",
        alone[4],
        *with_feed,
        f"{room.goal_ms:g}",
    ]
    return "| " + " | ".join(cells) + " |", alone_ok and feed_ok


def _silences(
    rows: Sequence[AcousticRow], truth: dict[tuple[str, int | None], AcousticRow], shift: float
) -> list[tuple[float, AcousticRow, AcousticRow]]:
    """Each turn both measured: its silence's error (ms), the row and its truth."""
    found = [(r, truth.get((r.question_id, r.round))) for r in rows]
    return [
        (r.first_audible_ms - t.first_audible_ms - shift, r, t)
        for r, t in found
        if r.ok and t is not None and t.ok and r.first_audible_ms is not None and t.first_audible_ms is not None
    ]


def _stats(errors: list[float], played: int, goal_ms: float) -> tuple[list[str], bool]:
    """Found / played, the error's median, P90 and worst size, whether the goal was met; and that."""
    sizes = np.abs(errors) if errors else np.array([np.nan])
    p90 = float(np.percentile(sizes, 90))
    ok = len(errors) == played and p90 <= goal_ms
    cells = [f"{len(errors)} / {played}", f"{np.median(sizes):.1f}", f"{p90:.1f}", f"{np.max(sizes):.1f}"]
    return [*cells, "yes" if ok else "**no**"], ok


def _prepared(
    stereo: np.ndarray, rate: int, room: Room, played: list[PlayedQuestion], schedule: list[int]
) -> np.ndarray:
    """The stereo recording at the room's rate, its answers faded in where the condition asks for soft onsets."""
    x = (
        stereo
        if room.rate == rate
        else np.stack([soxr.resample(stereo[:, c], rate, room.rate, quality="HQ") for c in (0, 1)], axis=1)
    )
    if not room.soft:
        return np.asarray(x)
    x = np.array(x)
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "plain.wav"
        soundfile.write(wav, x, room.rate, subtype="PCM_16")
        rows = measure_recording(wav, played, "stereo", schedule=schedule)
    fade = round(FADE_S * room.rate)
    for r in rows:
        if r.ok and r.first_audible_s is not None:
            at = round(r.first_audible_s * room.rate)
            part = x[at : at + fade, 1]
            x[at : at + len(part), 1] = part * np.linspace(0.0, 1.0, len(part))
    return x


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
    rows = measure_recording(wav, played, layout="mono", schedule=played_order(len(played), 2))
    return report("sound server", *pairs(traced(device), rows))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=8, help="questions of each language")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the emulator's own recording")
    p.add_argument("--tts", choices=("espeak", "stub"), default="espeak", help="what speaks the answers")
    p.add_argument("--out", type=Path, help="keep the recordings and runs here (default: a temporary folder)")
    p.add_argument("--from", dest="earlier", type=Path, help="an earlier --out: measure its emulator run again")
    p.add_argument("--quick", action="store_true", help="only the goals' corners of the room sweep")
    args = p.parse_args(argv)
    print(f"load average before the run: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        cfg = configs(out, args.tts)
        fixtures = subset(out, args.questions)
        played = load_questions(fixtures, load_config([Path(c) for c in cfg[1::2]]))
        print(f"questions: {', '.join(q.question_id for q in played)}; answers by {args.tts}; under {out}")
        schedule = played_order(len(played), args.rounds)
        emulator = (args.earlier or out) / "emulator"
        if args.earlier is None:
            run_device(emulator, cfg, fixtures, args.rounds, ["--record-audio", str(emulator / "rec")])
        wav = emulator / "rec" / "0.wav"
        ok = report(
            "emulator", *pairs(traced(emulator / "device"), measure_recording(wav, played, "stereo", schedule=schedule))
        )
        stereo, rate = soundfile.read(wav, dtype="float64", always_2d=True)
        ok = room_table(stereo, rate, played, schedule, sweep(args.quick), out) and ok
        sound = sound_server(out, cfg, fixtures, played)
    print("\nall conditions within their goals" if ok and sound is not False else "\nsome conditions beyond their goal")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
