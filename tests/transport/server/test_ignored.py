"""What a session does not act on is counted by kind: a device's strings never become the counts' keys."""

from __future__ import annotations

import asyncio
import tracemalloc

from pipeline.clock import VirtualClock
from pipeline.transport.server.ignored import MOST_KINDS, OTHER_KINDS, Ignored, kind_of, malformed_kind
from pipeline.transport.server.server_settings import SessionSettings
from pipeline.transport.wire.messages import Goodbye, Lab, Listen, Other
from tests.scenario import SILENCE, TONE
from tests.server_harness import FakeChannel, Turns, say_hello, session, virtual

CLIP = [SILENCE] * 3 + [TONE] * 10 + [SILENCE] * 12
QUIET = SessionSettings(idle_goodbye_s=0, idle_close_s=0)


def test_a_known_type_or_state_is_counted_by_name_and_any_other_under_its_kinds_bucket() -> None:
    assert kind_of(Other("iot")) == "iot" and kind_of(Goodbye()) == "goodbye"
    assert kind_of(Other("x" * 10_000)) == kind_of(Other("y")) == "unknown type"
    assert kind_of(Listen("start")) == "listen:start"
    assert kind_of(Listen("z" * 10_000)) == "listen: unknown state"
    assert kind_of(Lab(state="answer")) == "lab: unknown state"
    assert malformed_kind("header says 9 payload bytes, the message holds 2") == malformed_kind(
        "header says 1000 payload bytes, the message holds 12"
    )


def test_the_counts_hold_at_most_their_kinds_whatever_is_counted() -> None:
    ignored = Ignored()
    for n in range(1000):
        ignored.count(f"kind {n}")
    counts = ignored.take()
    assert len(counts) == MOST_KINDS + 1 and counts[OTHER_KINDS] == 1000 - MOST_KINDS
    assert ignored.take() == {}


def test_190_unknown_messages_of_100_kb_hold_no_memory_and_the_turn_counts_them_by_kind() -> None:
    """The attack: each message of another ``type`` (or ``listen`` state) was a key until the turn ended, then
    written to its span: 190 of 1 MB held 190 MiB on one connection, within the flood guard's allowance."""
    turns, held = Turns(), []

    async def device(channel: FakeChannel) -> None:
        say_hello(channel)
        channel.say({"type": "listen", "state": "start", "mode": "auto"})
        await asyncio.sleep(0.1)
        tracemalloc.start()
        try:
            for n in range(95):
                channel.say({"type": f"{n:03d}" + "x" * 100_000})
                channel.say({"type": "listen", "state": f"{n:03d}" + "y" * 100_000})
            await asyncio.sleep(0.1)  # the session reads them all
            held.append(tracemalloc.get_traced_memory()[0])
        finally:
            tracemalloc.stop()
        for pcm in CLIP:
            channel.frame(pcm)
            await asyncio.sleep(0.06)
        while not channel.messages("tts", "stop"):
            channel.frame(SILENCE)
            await asyncio.sleep(0.06)

    async def main() -> None:
        channel = FakeChannel(QUIET, VirtualClock())
        await session(device(channel), channel, turns, QUIET)

    virtual(main())
    ((_, timeline),) = turns.done
    assert timeline.ok and timeline.dropped == {"unknown type": 95, "listen: unknown state": 95}
    assert held[0] < 1_000_000  # before: 19 MB, every message's type kept whole
