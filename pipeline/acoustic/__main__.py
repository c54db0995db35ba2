"""``python -m pipeline.acoustic``: measure recordings (``measure``), or play to a real device and measure it (``run``).

    python -m pipeline.acoustic measure RECORDING... --questions FIXTURES --out ROWS.csv
        [--layout stereo|mono|room-feed] [--rounds R] [--config TOML] [--model-cache DIR]

With ``--rounds R`` the recordings hold the questions as the replay plays them (device N's recording, ``N.wav``:
the fixtures started at question N, R rounds): every question played is exactly one row, one not found a
failed row with its best score. Without it, each question found is a row and one not found is not seen (a
reverberant room needs the order: see docs/tasks/acoustic.md).

One row per turn found (``pipeline.records.acoustic``), its silence from the question's end of speech: the
question's truth where the fixtures carry one (``truth.csv``), else where ``--config``'s VAD ends the clip's
speech; the row's ``speech_end_from`` says which. Every recording is measured even when another fails;
the command exits 1 when any turn or file failed (the rows it has are written, the failures say why), 2
when the questions themselves cannot be used.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from pipeline.acoustic.measure import measure_recording
from pipeline.acoustic.questions import QuestionError, load_questions
from pipeline.acoustic.recording import LAYOUTS
from pipeline.acoustic.schedule import played_order
from pipeline.records.acoustic import write_rows
from pipeline.settings.config import ConfigError, load_config
from pipeline.settings.fixtures import FixtureError
from pipeline.settings.models import ModelError, default_cache


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run"]:
        return _run(args[1:])
    parsed = _parser().parse_args(args)
    return measure(parsed)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipeline.acoustic", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "run", help="play the questions to a real device and measure it (python -m pipeline.acoustic run -h)"
    )
    m = commands.add_parser("measure", help="measure recordings: one row per turn")
    m.add_argument("recordings", nargs="+", type=Path, metavar="RECORDING")
    m.add_argument("--questions", type=Path, required=True, metavar="FIXTURES", help="the fixtures folder played")
    m.add_argument("--out", type=Path, required=True, metavar="ROWS.csv")
    m.add_argument(
        "--layout",
        choices=LAYOUTS,
        default="stereo",
        help="stereo: microphone left, speaker right (the emulator's); mono: one room microphone; room-feed: a "
        "room microphone left, what the device's speaker was fed right (answers found by their waveform)",
    )
    m.add_argument(
        "--rounds",
        type=int,
        metavar="R",
        help="the recordings hold R rounds of the questions in the replay's order: every one played is a row",
    )
    m.add_argument(
        "--config",
        type=Path,
        action="append",
        metavar="TOML",
        help="the run's configuration: its VAD finds where a question without a truth (truth.csv) ends its speech",
    )
    m.add_argument("--model-cache", type=Path, metavar="DIR", help="packaged models (default: the user's cache)")
    return parser


def measure(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config) if args.config else None
        questions = load_questions(args.questions, cfg, args.model_cache or default_cache(os.environ))
    except (QuestionError, FixtureError, ConfigError, ModelError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.rounds is not None and args.rounds < 1:
        print(f"error: --rounds {args.rounds}: at least 1", file=sys.stderr)
        return 2
    rows = []
    for path in args.recordings:
        schedule = None if args.rounds is None else played_order(len(questions), args.rounds, _device(path))
        rows += measure_recording(path, questions, args.layout, schedule=schedule)
    count = write_rows(args.out, rows)
    failed = [r for r in rows if not r.ok]
    for r in failed:
        print(f"error: {r.error}", file=sys.stderr)
    print(f"{args.out}: {count} rows, {count - len(failed)} turns measured, {len(failed)} failed")
    if args.rounds is None:
        print("  (without --rounds a question not found has no row: give the rounds the replay played)")
    return 1 if failed else 0


def _device(path: Path) -> int:
    """The device a recording is of: the number its name ends with (the replay writes ``N.wav``), else 0."""
    digits = re.search(r"(\d+)$", path.stem)
    return int(digits.group(1)) if digits else 0


def _run(argv: list[str]) -> int:
    """``run``: pipeline.acoustic.run's own command, imported only when asked (it opens the audio devices)."""
    try:
        run = importlib.import_module("pipeline.acoustic.run")
    except ImportError as exc:
        print(
            f"error: `run` is not available here: pipeline.acoustic.run could not be imported ({exc})", file=sys.stderr
        )
        return 2
    return int(run.main(argv) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
