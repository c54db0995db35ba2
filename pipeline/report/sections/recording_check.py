"""Section 1c, what the recording says: the traces' silence beside the one measured from the sound itself.

Given acoustic rows (``python -m pipeline.report ... --acoustic ROWS.csv``), per run: each turn's
trace silence minus the recording's, their median and the worst, and the turns that disagree by
more than the tolerance (5 ms on the emulator's own recording, 20 ms in a room:
``--acoustic-tolerance-ms``), by how much. Each table names the trace column compared (``Match.compared``):
the silence from the question's true end where the row's end of speech is its truth, else from the VAD's end;
the run's ``--config`` is asked after only where a turn beyond the tolerance took its end from a VAD. One
turn's waveform is drawn with both methods' marks: the turn that disagrees most, so the figure shows the
difference a reader must judge. Without acoustic rows the section says how to get them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipeline.analysis.numbers import median
from pipeline.report import cells
from pipeline.report.acoustic_match import MEASURE_COMMAND, TRUE_END_COLUMN, Acoustic, Match
from pipeline.report.document import NOTE, WARNING, Block, Bullets, Figure, Heading, Paragraph, Table
from pipeline.report.sections.base import Context
from pipeline.report.waveform import Mark, WaveformError, read_wav, waveform_plot

HEADING = "1c. What the recording says"
ATTRIBUTION = "measured (traces and recording)"
MOST_TURNS = 100  # every compared turn listed up to this many; past it, the turns beyond the tolerance only
COMPARED = (
    f"Trace column: the traces' silence compared, from the same end of speech as the recording's: `{TRUE_END_COLUMN}` "
    "where the acoustic row's end of speech is its question's truth, else from the VAD's end (`first_audible_ms`; "
    "in one process `first_audio_ms`)."
)
HOW = (
    "No acoustic rows were given, so the traces' silence is not checked against a recording here. To check it: "
    "record the run (`python -m pipeline.replay FIXTURES --transport websocket --record-audio DIR ...`), measure "
    f"the recordings (`{MEASURE_COMMAND}`) and give the rows to the report "
    "(`python -m pipeline.report TRACES --acoustic ROWS.csv --recordings DIR`)."
)


def _turn(m: Match) -> str:
    device = f"device {m.trace.device}, " if m.trace.device is not None else ""
    return f"{m.trace.run_id} {device}{m.trace.question_id} round {m.trace.round}"


def _signed(value: float | None, unit: str = " ms") -> str:
    """``cells.signed``, with a difference that rounds to nothing shown as +0.0, never -0.0."""
    return cells.signed(None if value is None else round(value, 1) + 0.0, unit)


def _differences(matches: Sequence[Match]) -> list[tuple[Match, float]]:
    return [(m, d) for m in matches if (d := m.difference_ms) is not None]


def _beyond(matches: Sequence[Match], tolerance_ms: float) -> list[tuple[Match, float]]:
    """The compared turns beyond the tolerance, the largest difference first."""
    found = [(m, d) for m, d in _differences(matches) if abs(d) > tolerance_ms]
    return sorted(found, key=lambda f: (-abs(f[1]), _turn(f[0])))


def _columns(matches: Sequence[Match]) -> str:
    return ", ".join(sorted({m.compared for m in matches}))


def beyond(ctx: Context) -> int:
    """How many compared turns differ by more than the tolerance (0 without acoustic rows)."""
    if ctx.acoustic is None:
        return 0
    return sum(1 for _, d in _differences(ctx.matched()[0]) if abs(d) > ctx.acoustic.tolerance_ms)


def run_table(matches: Sequence[Match], tolerance_ms: float) -> Table:
    """Per run: turns compared, the median and worst difference, and how many are beyond the tolerance."""
    by_run: dict[str, list[Match]] = {}
    for m in matches:
        by_run.setdefault(m.trace.run_id, []).append(m)
    rows = []
    for run, mine in by_run.items():
        found = _differences(mine)
        if not found:
            rows.append((run, f"0/{len(mine)}", _columns(mine), "-", "-", "-", "-", "-", ATTRIBUTION))
            continue
        worst, by = max(found, key=lambda f: abs(f[1]))
        beyond = sum(1 for _, d in found if abs(d) > tolerance_ms)
        rows.append(
            (
                run,
                f"{len(found)}/{len(mine)}",
                _columns(mine),
                cells.ms(median([m.trace_ms for m, _ in found if m.trace_ms is not None])),
                cells.ms(median([m.row.first_audible_ms for m, _ in found if m.row.first_audible_ms is not None])),
                _signed(median([d for _, d in found]), ""),
                f"{_signed(by, '')} ({worst.trace.question_id} round {worst.trace.round})",
                f"{beyond}/{len(found)}",
                ATTRIBUTION,
            )
        )
    headers = (
        "run",
        "turns compared / matched",
        "trace column",
        "silence median, traces (ms)",
        "silence median, recording (ms)",
        "median difference (ms)",
        "worst difference (ms)",
        f"beyond ±{tolerance_ms:g} ms",
        "attribution",
    )
    caption = (
        "Difference: the traces' silence (end of speech -> first audible sound) minus the recording's, per turn. "
        f"A turn is compared where both give a silence. {COMPARED}"
    )
    return Table("recording-runs", headers, tuple(rows), caption)


def turn_table(matches: Sequence[Match], tolerance_ms: float) -> Table:
    """Every compared turn, in the acoustic rows' order: both silences, their difference and whether it is within."""
    rows = tuple(
        (
            _turn(m),
            m.compared,
            cells.ms(m.trace_ms),
            cells.ms(m.row.first_audible_ms),
            _signed(d, ""),
            "yes" if abs(d) <= tolerance_ms else f"no: beyond ±{tolerance_ms:g} ms",
        )
        for m, d in _differences(matches)
    )
    headers = ("turn", "trace column", "traces (ms)", "recording (ms)", "difference (ms)", "within the tolerance")
    caption = f"Every turn both measured: the silence, end of speech -> first audible sound. {COMPARED}"
    return Table("recording-turns", headers, rows, caption)


def disagreement_table(matches: Sequence[Match], tolerance_ms: float) -> Table:
    """Every turn beyond the tolerance, the largest difference first."""
    rows = tuple(
        (_turn(m), m.compared, cells.ms(m.trace_ms), cells.ms(m.row.first_audible_ms), _signed(d, ""), m.row.where)
        for m, d in _beyond(matches, tolerance_ms)
    )
    headers = ("turn", "trace column", "traces (ms)", "recording (ms)", "difference (ms)", "acoustic row")
    caption = f"Turns whose two silences differ by more than {tolerance_ms:g} ms. {COMPARED}"
    return Table("recording-disagree", headers, rows, caption)


def disagreement_warning(matches: Sequence[Match], tolerance_ms: float) -> str:
    """What the turns beyond the tolerance say. The run's VAD is asked after only where some of them took their end
    of speech from a VAD: a turn compared from its question's truth on both sides has no VAD in its difference."""
    beyond = _beyond(matches, tolerance_ms)
    said = f"{len(beyond)} turn(s) disagree by more than ±{tolerance_ms:g} ms"
    from_vad = sum(1 for m, _ in beyond if m.compared != TRUE_END_COLUMN)
    if not from_vad:
        return f"{said}, each compared from its question's true end of speech (`{TRUE_END_COLUMN}`), no VAD's:"
    return (
        f"{said}, {from_vad} of them from the VAD's end of speech. Were the recordings measured with the run's own "
        "configuration (`--config`)? Its VAD decides where the speech of a question without a truth ends:"
    )


def _problems(ctx: Context, acoustic: Acoustic) -> list[Block]:
    matches, unmatched = ctx.matched()
    out: list[Block] = []
    failed = [f"{m.row.where}: {_turn(m)}: {m.row.error or 'no reason given'}" for m in matches if not m.row.ok]
    failed += [f"{row.where}: {row.error or 'no reason given'}" for row, _ in unmatched if not row.ok]
    if failed:
        out.append(Paragraph(f"{len(failed)} turn(s) the recording could not measure:", WARNING))
        out.append(Bullets(tuple(failed), WARNING))
    lost = [
        f"{row.where}: {row.question_id} round {row.round} ({row.device}): {why}" for row, why in unmatched if row.ok
    ]
    if lost:
        out.append(Paragraph(f"{len(lost)} acoustic row(s) match no turn of these traces:", WARNING))
        out.append(Bullets(tuple(lost), WARNING))
    recorded = {m.trace.run_id for m in matches}
    missing = sum(1 for r in ctx.data.rows if r.run_id in recorded) - len(matches)
    if missing > 0:
        out.append(Paragraph(f"{missing} turn(s) of the recorded runs have no acoustic row.", NOTE))
    return out


def figure(acoustic: Acoustic, matches: Sequence[Match]) -> Block | None:
    """The waveform of the turn that disagrees most (among those with the recording's marks and a readable
    recording), or a note saying why none is drawn; None where no turn was compared."""
    found = sorted(_differences(matches), key=lambda f: -abs(f[1]))
    drawable = [(m, d) for m, d in found if m.row.speech_end_s is not None and m.row.first_audible_s is not None]
    if not drawable:
        return None
    m, d = drawable[0]
    path = acoustic.wav(m.row)
    if path is None:
        return Paragraph("No waveform: give the recordings (`--recordings DIR`, or a `recording` column).", NOTE)
    try:
        samples, rate = read_wav(Path(path))
    except WaveformError as exc:
        return Paragraph(f"No waveform: {exc}.", WARNING)
    end, heard = m.row.speech_end_s, m.row.first_audible_s
    assert end is not None and heard is not None and m.trace_ms is not None  # drawable, compared
    traced = end + m.trace_ms / 1000
    marks = (
        Mark(end, "end of speech (recording)", "#2ca02c"),
        Mark(heard, "first audible (recording)", "#1f77b4"),
        Mark(traced, "first audible (traces)", "#d62728", "--"),
    )
    png = waveform_plot(samples, rate, marks, max(0.0, end - 0.5), max(heard, traced) + 0.5)
    caption = (
        f"{_turn(m)} ({path}): the turn whose two silences differ most ({_signed(d)}). The traces' first "
        "audible mark is drawn at the recording's end of speech + the traces' silence, so a difference at either end "
        "(the end of speech or the first sound) shows at the first sound; below, the speaker zoomed."
    )
    return Figure("recording-waveform", png, caption, f"waveform of {_turn(m)} with both methods' marks")


def section(ctx: Context) -> list[Block]:
    out: list[Block] = [Heading(2, HEADING)]
    acoustic = ctx.acoustic
    if acoustic is None:
        return [*out, Paragraph(HOW, NOTE)]
    tolerance = acoustic.tolerance_ms
    out.append(
        Paragraph(
            f"{len(acoustic.rows)} turn(s) measured from recordings ({', '.join(acoustic.sources)}), matched to the "
            f"traces' turns on run, device, question and round. Tolerance: ±{tolerance:g} ms "
            "(5 ms on the emulator's own recording, 20 ms in a room: `--acoustic-tolerance-ms`)."
        )
    )
    matches = ctx.matched()[0]
    out.extend(_problems(ctx, acoustic))
    if not matches:
        return out
    out.append(run_table(matches, tolerance))
    compared = len(_differences(matches))
    if compared <= MOST_TURNS:
        out.append(turn_table(matches, tolerance))
    else:
        out.append(
            Paragraph(
                f"{compared} turns compared: past {MOST_TURNS}, only those beyond the tolerance are listed.", NOTE
            )
        )
    beyond = disagreement_table(matches, tolerance)
    if beyond.rows:
        out.append(Paragraph(disagreement_warning(matches, tolerance), WARNING))
        out.append(beyond)
    elif _differences(matches):
        out.append(Paragraph(f"Every compared turn agrees within ±{tolerance:g} ms."))
    if ctx.draw and (drawn := figure(acoustic, matches)) is not None:
        out.append(drawn)
    return out
