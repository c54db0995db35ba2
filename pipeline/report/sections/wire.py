"""Section 2b, the device and the wire: what a device across a real transport lived through.

Shown only for conditions whose rows come from a device over a transport (``replay --server``).
From the user's end of speech: the server's recognised text arriving, the first audio frame
arriving, the first sound played; between the last two the device's own segment (decode, jitter
buffer, start of playback); on a lossy transport the packets lost and late; with barge-in, how
fast the answer stopped. The network's own share is not separable from the device alone; with
our server's traces read beside the device's (the server's turn span is a child of the device's),
the first sound splits into uplink, server, downlink and the device's own part
(``pipeline.analysis.wire_segment``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pipeline.report import cells
from pipeline.report.compare import Stat, stat, stat_of
from pipeline.report.conditions import Condition
from pipeline.report.document import Block, Heading, Paragraph, Table
from pipeline.report.sections.base import MEASURED, Context, header, row

NO_DEVICE = "- (in-process: no transport)"


def _over_transport(cond: Condition) -> bool:
    return any(r.transport for r in cond.measured)


def device_segment(cond: Condition) -> Stat:
    """First frame received -> first sound played, per turn: decode, jitter buffer, start of playback."""
    gap = cond.column("first_audible_ms") - cond.column("first_audio_received_ms")
    return stat_of(np.sort(gap[~np.isnan(gap)]), 0.5, f"{cond.label}|device_segment", len(cond.measured))


def _packets(cond: Condition, metric: str) -> str:
    values = cond.values(metric)
    if not len(values):
        return f"{cells.NOT_MEASURED} (a reliable transport)"
    return f"{int(values.sum())} in {len(values)} turn(s), at most {int(values.max())}"


def section(ctx: Context) -> list[Block]:
    wired = {label: cond for label, cond in ctx.conds.items() if _over_transport(cond)}
    if not wired:
        return []
    out: list[Block] = [Heading(2, "2b. The device and the wire")]

    def cell(metric: str) -> Callable[[Condition], str]:
        return lambda c: cells.stat(stat(c, metric)) if c.label in wired else NO_DEVICE

    def line(name: str, metric: str) -> tuple[str, ...]:
        return row(name, ctx.labels, ctx.conds, cell(metric), MEASURED)

    def packets(metric: str) -> Callable[[Condition], str]:
        return lambda c: _packets(c, metric) if c.label in wired else NO_DEVICE

    rows: tuple[tuple[str, ...], ...] = (
        row("transport", ctx.labels, ctx.conds, lambda c: _transports(c) if c.label in wired else NO_DEVICE, "-"),
        line("end of speech -> text received (stt, ms)", "stt_received_ms"),
        line("end of speech -> first audio frame received (ms)", "first_audio_received_ms"),
        line("end of speech -> first sound played (ms)", "first_audible_ms"),
        row(
            "device: first frame received -> first sound (decode, jitter buffer; ms)",
            ctx.labels,
            ctx.conds,
            lambda c: cells.stat(device_segment(c)) if c.label in wired else NO_DEVICE,
            MEASURED,
        ),
    )
    if any(len(c.values("uplink_ms")) for c in wired.values()):  # the server's spans joined to the device's
        rows += (
            line("first sound, split: uplink (end of speech captured -> its frame at the server; ms)", "uplink_ms"),
            line("first sound, split: server (-> first audio frame sent; ms)", "server_first_audio_ms"),
            line("first sound, split: downlink (-> at the device; ms)", "downlink_ms"),
            line("first sound, split: device (-> decoded, buffered, sounding; ms)", "device_buffer_ms"),
        )
    if any(len(c.values("packets_lost")) for c in wired.values()):  # a lossy transport (UDP)
        rows += (
            row("packets lost (incoming audio)", ctx.labels, ctx.conds, packets("packets_lost"), MEASURED),
            row("packets late (not played)", ctx.labels, ctx.conds, packets("packets_late"), MEASURED),
        )
    if any(len(c.values("interrupt_played_ms")) for c in wired.values()):  # barge-in was asked for
        rows += (
            line("barge-in -> last frame received (ms)", "interrupt_received_ms"),
            line("barge-in -> silence (ms)", "interrupt_played_ms"),
        )
    caption = (
        "Medians over measured successful turns, from the device's own spans; times from the user's end of speech."
    )
    out.append(Table("device-wire", header("device and wire", ctx.labels), rows, caption))
    out.append(
        Paragraph(
            "The device's rows hold no stage times: the server's own trace of each turn (the same trace id when "
            "both ends are this lab; give both trace folders) splits the rest into uplink, the server's stages "
            "(queue, inference, generation) and downlink."
        )
    )
    return out


def _transports(cond: Condition) -> str:
    return ", ".join(sorted({str(r.transport) for r in cond.measured if r.transport}))
