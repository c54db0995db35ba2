"""The lab's server behaves as xiaozhi-esp32-server where a device can tell, on the virtual clock.

Each rule's source is named (``main/xiaozhi-server/`` of the real server): what it says when it
recognised nothing, the ``stt`` text it shows, its idle goodbye and close, silence after a ``listen
start``, the mute after a wake word, speech after an end-point heard as a new utterance.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest

from pipeline.events import Event, LatencyProfile, StageInfo
from pipeline.run.turn import ServerStages
from pipeline.transport.server.requests import TurnRequest
from pipeline.transport.server.server_settings import SessionSettings
from pipeline.transport.server.texts import stt_text, wake_text
from pipeline.transport.wire.messages import Llm, Stt, Tts
from stages.asr.oracle import OracleAsr
from tests.scenario import SILENCE, TONE
from tests.server_harness import FakeChannel, Turns, say_hello, session, virtual

CLIP = [SILENCE] * 3 + [TONE] * 10 + [SILENCE] * 12  # the energy VAD end-points 600 ms after the tone
QUIET = SessionSettings(idle_goodbye_s=0, idle_close_s=0)


async def speak(channel: FakeChannel, frames: list[bytes]) -> None:
    for pcm in frames:
        channel.frame(pcm)
        await asyncio.sleep(0.06)


def run(script: object, turns: Turns | None = None, settings: SessionSettings = QUIET) -> tuple[FakeChannel, Turns]:
    turns = turns or Turns()

    async def main() -> FakeChannel:
        from pipeline.clock import VirtualClock

        channel = FakeChannel(settings, VirtualClock())
        await session(script(channel), channel, turns, settings)  # type: ignore[operator]
        return channel

    return virtual(main()), turns


@pytest.mark.parametrize(
    ("heard", "shown"),
    [
        ("今天天气怎么样？", "今天天气怎么样？"),  # a question mark is kept
        ("你好。", "你好"),
        ("“你好”", "你好"),
        (" 你好，世界！ ", "你好，世界"),
        ("Hello, world.", "Hello, world"),
        ("好的……", "好的……"),
        ("你好😊", "你好"),
    ],
)
def test_stt_shows_what_the_real_server_shows(heard: str, shown: str) -> None:
    """textUtils.get_string_no_punctuation_or_emoji: cut from both ends only (cases run on the real function)."""
    assert stt_text(heard) == shown


@pytest.mark.parametrize(
    ("said", "compared"),
    [
        ("你好，小智！", "你好小智"),
        ("你好 小智", "你好小智"),
        ("你好小智…", "你好小智…"),  # not a wake word to the real server
        ("你好、小智", "你好、小智"),
        ("Hi ESP", "HiESP"),
        ("Yeah", ""),
    ],
)
def test_a_wake_word_is_told_as_the_real_server_tells_it(said: str, compared: str) -> None:
    """util.remove_punctuation_and_length (cases run on the real function)."""
    assert wake_text(said) == compared


def test_silence_after_a_listen_start_in_auto_mode_is_no_turn_however_long() -> None:
    """The real server keeps listening to silence with no limit of its own (listenMessageHandler.py); the lab
    wrote a timeout row at its turn limit."""

    async def device(channel: FakeChannel) -> None:
        say_hello(channel)
        channel.say({"type": "listen", "state": "start", "mode": "auto"})
        await speak(channel, [SILENCE] * 1200)  # 72 s, past the 60 s turn limit
        channel.leave()

    channel, turns = run(device)
    assert turns.done == [] and channel.messages("tts") == []


def test_no_voice_for_the_idle_time_and_the_llm_says_goodbye_then_the_connection_closes() -> None:
    """receiveAudioHandle.py no_voice_close_connect: tts start (no stt: the end prompt is not shown), the LLM's
    goodbye, tts stop, then close 1000."""
    settings = dataclasses.replace(QUIET, idle_goodbye_s=5.0)

    async def device(channel: FakeChannel) -> None:
        say_hello(channel)
        channel.say({"type": "listen", "state": "start", "mode": "auto"})
        while channel.closed is None:
            channel.frame(SILENCE)
            await asyncio.sleep(0.06)

    channel, turns = run(device, settings=settings)
    assert channel.messages("stt") == []
    said = [m for m in channel.messages() if isinstance(m, Tts | Llm)]
    assert [getattr(m, "state", "llm") for m in said][:3] == ["start", "llm", "sentence_start"]
    assert isinstance(said[-1], Tts) and said[-1].state == "stop"
    assert channel.closed == (1000, "")
    ((request, timeline),) = turns.done
    assert (request.started_by, request.text, timeline.ok) == ("idle", settings.end_prompt, True)
    start = next(at for at, m in channel.sent if isinstance(m, Tts) and m.state == "start")
    assert start == 5040  # the first frame more than 5 s after the last activity (the hello) starts it


def test_no_audio_at_all_for_the_close_time_and_the_connection_closes_at_the_next_check() -> None:
    """connection.py: checked every 10 s, closed with 1000 and no message once past the limit."""
    settings = dataclasses.replace(QUIET, idle_close_s=30.0)

    async def device(channel: FakeChannel) -> None:
        say_hello(channel)
        while channel.closed is None:
            await asyncio.sleep(1)

    channel, _ = run(device, settings=settings)
    assert channel.closed == (1000, "") and channel.closed_at == 40_000  # at 30 s not yet past: at 40 s
    assert [type(m).__name__ for m in channel.messages()] == ["Hello"]


class _HearsNothingFirst(Turns):
    def stages(self, request: TurnRequest) -> ServerStages:
        built = super().stages(request)
        if not self.done:
            return dataclasses.replace(built, asr=OracleAsr("", "en", LatencyProfile(40)))
        return built


def test_an_utterance_recognised_as_nothing_is_told_nothing_and_the_next_one_is_heard() -> None:
    """asr/base.py: an empty recognition sends nothing at all (the lab sent tts stop without tts start)."""
    turns = _HearsNothingFirst()

    async def device(channel: FakeChannel) -> None:
        say_hello(channel)
        channel.say({"type": "listen", "state": "start", "mode": "auto"})
        await speak(channel, CLIP)
        while not turns.done:
            await speak(channel, [SILENCE])
        assert channel.messages("tts") == [] and channel.messages("stt") == []
        await speak(channel, CLIP)  # the firmware still streams: the user says it again
        while len(turns.done) < 2:
            await speak(channel, [SILENCE])
        channel.leave()

    channel, done = run(device, turns)
    assert [tl.error_type for _, tl in done.done] == ["empty_transcript", ""]
    assert [m.text for m in channel.messages("stt") if isinstance(m, Stt)] == ["question"]
    assert [m.state for m in channel.messages("tts") if isinstance(m, Tts)][::1][0] == "start"


def test_speech_after_an_end_point_is_a_new_utterance_that_stops_the_answer_under_way() -> None:
    """receiveAudioHandle.py: the VAD hears every frame in auto mode, listen start or not; a second utterance
    recognised while the first answer is on its way stops it (tts stop) before its own stt (zh02's pause)."""

    async def device(channel: FakeChannel) -> None:
        say_hello(channel)
        channel.say({"type": "listen", "state": "start", "mode": "auto"})
        first_half = [SILENCE] * 3 + [TONE] * 10 + [SILENCE] * 11  # end-pointed after 600 ms of silence
        await speak(channel, first_half + [TONE] * 10 + [SILENCE] * 12)  # then the rest, after the pause
        while len(channel.messages("tts", "stop")) < 2:
            await speak(channel, [SILENCE])
        channel.leave()

    channel, turns = run(device)
    said = [(type(m).__name__, getattr(m, "state", None)) for m in channel.messages() if isinstance(m, Stt | Tts)]
    second = said.index(("Stt", None), 1)
    assert said[:2] == [("Stt", None), ("Tts", "start")] and said[second - 1] == ("Tts", "stop")
    assert ("Tts", "stop") not in said[: second - 1]  # the first answer's only stop is the one its successor sent
    assert [tl.error_type for _, tl in turns.done][:1] == ["interrupted"]
    assert [r.started_by for r, _ in turns.done] == ["listen", "speech"]


def test_per_listen_mode_is_the_labs_old_rule_one_utterance_per_listen_start() -> None:
    """auto_listening = per-listen: after the end-point the audio is no one's until the next listen start."""
    settings = dataclasses.replace(QUIET, auto_listening="per-listen")

    async def device(channel: FakeChannel) -> None:
        say_hello(channel)
        channel.say({"type": "listen", "state": "start", "mode": "auto"})
        first_half = [SILENCE] * 3 + [TONE] * 10 + [SILENCE] * 11
        await speak(channel, first_half + [TONE] * 10 + [SILENCE] * 12)
        while not channel.messages("tts", "stop"):
            await speak(channel, [SILENCE])
        channel.leave()

    channel, turns = run(device, settings=settings)
    assert [(r.started_by, tl.ok) for r, tl in turns.done] == [("listen", True)]
    assert len(channel.messages("stt")) == 1


def test_audio_in_the_two_seconds_after_a_wake_reply_is_ignored_then_heard() -> None:
    """receiveAudioHandle.py: the mute starts at the first frame after the wake word, not at the detect."""

    async def device(channel: FakeChannel) -> None:
        say_hello(channel)
        channel.say({"type": "listen", "state": "detect", "text": "你好小智"})
        await asyncio.sleep(5)  # the reply plays; the device sends nothing meanwhile
        channel.say({"type": "listen", "state": "start", "mode": "auto"})
        await speak(channel, [TONE] * 20)  # 1.2 s of speech inside the mute: never heard
        await speak(channel, [SILENCE] * 20 + CLIP)
        while not channel.messages("tts", "stop")[1:]:
            await speak(channel, [SILENCE])
        channel.leave()

    _, turns = run(device)
    ((request, timeline),) = turns.done
    assert request.started_by == "listen" and timeline.ok
    assert timeline.dropped["audio in the mute after a wake word or typed text"] == 2000 // 60 + 1


class _Deaf:
    """An ASR that hears nothing it can write down: no transcript at all."""

    info = StageInfo("asr", "deaf")

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for _ in events:
            pass
        return
        yield


class _DeafFirst(Turns):
    def stages(self, request: TurnRequest) -> ServerStages:
        built = super().stages(request)
        return dataclasses.replace(built, asr=_Deaf()) if not self.done else built


def test_a_turn_that_told_the_device_nothing_ends_with_nothing_not_a_tts_stop() -> None:
    """A listener whose VAD heard speech and whose ASR wrote nothing down must not end with ``tts stop``: the
    device was never told ``tts start``, and a stray stop would end its next question (the real server sends
    none: asr/base.py)."""
    turns = _DeafFirst()

    async def device(channel: FakeChannel) -> None:
        say_hello(channel)
        channel.say({"type": "listen", "state": "start", "mode": "auto"})
        await speak(channel, CLIP)
        while not turns.done:
            await speak(channel, [SILENCE])
        await speak(channel, [SILENCE] * 10)
        channel.leave()

    channel, done = run(device, turns)
    assert [tl.ok for _, tl in done.done] == [False]
    assert channel.messages("tts") == [] and channel.messages("stt") == []


def test_a_turns_scripted_draws_are_its_questions_not_the_count_of_listeners_built_before_it() -> None:
    """Continuous listening builds a listener after every end-point; the scripted stages' seeded jitter must not
    move with how many were built (it moved the skews bench's medians by 29 and 82 ms, the same profiles)."""
    from pipeline.run.server_run import ServedTurns

    turns = ServedTurns.__new__(ServedTurns)
    turns.count = 0
    named = TurnRequest("s", "auto", "en01", 2)
    first = turns.salt(named)
    assert [turns.salt(TurnRequest("s", "auto", started_by="speech")) for _ in range(3)] == [1, 2, 3]
    assert turns.salt(named) == first != turns.salt(TurnRequest("s", "auto", "en01", 3))
