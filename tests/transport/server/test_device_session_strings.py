"""A device's strings reach a turn's records bounded: the attack named 150 typed turns with a 780 KB question id
that began with terminal escape sequences (224 MiB of traces, the operator's terminal obeying them)."""

from __future__ import annotations

import asyncio

from pipeline.clock import VirtualClock
from pipeline.transport.server.requests import MOST_ID_CHARS
from pipeline.transport.server.server_settings import SessionSettings
from tests.scenario import SILENCE, TONE
from tests.server_harness import FakeChannel, Turns, say_hello, session, virtual

QUIET = SessionSettings(idle_goodbye_s=0, idle_close_s=0)
ESCAPES = "\x1b]0;pwned\x07\x1b[2J"


def test_a_typed_turn_named_with_a_huge_question_id_keeps_it_cut() -> None:
    turns = Turns()

    async def device(channel: FakeChannel) -> None:
        say_hello(channel)
        lab = {"question_id": ESCAPES + "Q" * 780_000, "round": 1}
        channel.say({"type": "listen", "state": "detect", "text": "what time is it", "lab": lab})
        while not channel.messages("tts", "stop"):
            await asyncio.sleep(0.1)

    async def main() -> None:
        channel = FakeChannel(QUIET, VirtualClock())
        await session(device(channel), channel, turns, QUIET)

    virtual(main())
    ((request, timeline),) = turns.done
    assert timeline.ok and request.question_id.startswith(ESCAPES + "Q")  # escaped where printed, not here
    assert len(request.question_id) < MOST_ID_CHARS + 40 and request.question_id.endswith("more characters]")


def test_an_abort_reason_reaches_the_turns_error_cut() -> None:
    turns = Turns()

    async def device(channel: FakeChannel) -> None:
        say_hello(channel)
        channel.say({"type": "listen", "state": "start", "mode": "manual"})
        for pcm in [TONE] * 10:
            channel.frame(pcm)
            await asyncio.sleep(0.06)
        channel.say({"type": "listen", "state": "stop"})
        while not channel.messages("tts", "start"):
            channel.frame(SILENCE)
            await asyncio.sleep(0.06)
        channel.say({"type": "abort", "reason": "r" * 1_000_000})
        await asyncio.sleep(1)

    async def main() -> None:
        channel = FakeChannel(QUIET, VirtualClock())
        await session(device(channel), channel, turns, QUIET)

    virtual(main())
    ((_, timeline),) = turns.done
    assert timeline.error_type == "aborted" and len(timeline.error_message) < MOST_ID_CHARS + 100
