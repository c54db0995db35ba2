"""Scripted turns on the virtual clock: every latency is known, so every assertion is exact."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pipeline.events import Event, StageInfo, Transcript
from stages.llm.scripted import ScriptedReply
from tests.scenario import ms, run_virtual, stages, utterance

REPLY = ScriptedReply("Hi. How are you today? Fine.")


def test_single_call_turn_exact_timeline() -> None:
    tl = run_virtual(stages(REPLY))
    assert tl.ok, tl.error_message
    # speech ends with frame 29, which arrives at 30 x 60 ms; 10 silent frames later the VAD cuts
    assert ms(tl, tl.vad.user_speech_end_ns) == 1800
    assert ms(tl, tl.vad.end_ns) == 2400
    assert (ms(tl, tl.asr.start_ns), ms(tl, tl.asr.end_ns)) == (2400, 2700)
    [call] = tl.calls
    assert (ms(tl, call.start_ns), ms(tl, call.first_token_ns), ms(tl, call.end_ns)) == (2700, 2900, 3300)
    assert call.output_tokens == 9
    assert [(s.text, ms(tl, s.ref_ns), ms(tl, s.first_token_ns), ms(tl, s.complete_ns)) for s in tl.sentences] == [
        ("Hi.", 2700, 2900, 3000),
        ("How are you today?", 3000, 3000, 3250),
        ("Fine.", 3250, 3250, 3300),
    ]
    assert [(ms(tl, t.start_ns), ms(tl, t.first_frame_ns), t.audio_ms) for t in tl.tts] == [
        (3000, 3100, 240),
        (3250, 3350, 1320),
        (3980, 4080, 360),
    ]
    assert ms(tl, tl.playback.first_start_ns) == 3100
    assert {i: ms(tl, t) for i, t in tl.playback.sentence_start_ns.items()} == {0: 3100, 1: 3350, 2: 4670}
    assert ms(tl, tl.playback.last_end_ns) == 5030
    assert ms(tl, tl.end_ns) == 5030


def test_tts_of_a_sentence_overlaps_ongoing_generation() -> None:
    tl = run_virtual(stages(REPLY))
    [call] = tl.calls
    assert call.end_ns is not None
    first_tts = tl.tts[0]
    assert first_tts.first_frame_ns is not None and first_tts.end_ns is not None
    assert first_tts.start_ns < call.end_ns
    assert first_tts.end_ns < call.end_ns  # sentence 0 fully synthesised before generation finished
    assert tl.playback.first_start_ns is not None and tl.playback.first_start_ns < call.end_ns


def test_per_sentence_mode_makes_one_call_per_sentence() -> None:
    tl = run_virtual(stages(REPLY, mode="per-sentence"))
    assert tl.ok, tl.error_message
    assert [(c.index, c.purpose, c.output_tokens) for c in tl.calls] == [
        (0, "sentence", 2),
        (1, "sentence", 5),
        (2, "sentence", 2),
    ]
    # each call pays the first-token time again: 2700 -> 2900, 2950 -> 3150, 3350 -> 3550
    assert [(ms(tl, c.start_ns), ms(tl, c.first_token_ns), ms(tl, c.end_ns)) for c in tl.calls] == [
        (2700, 2900, 2950),
        (2950, 3150, 3350),
        (3350, 3550, 3600),
    ]
    assert [(s.text, s.call_index, ms(tl, s.first_token_ns) - ms(tl, s.ref_ns)) for s in tl.sentences] == [  # type: ignore[operator]
        ("Hi.", 0, 200),
        ("How are you today?", 1, 200),
        ("Fine.", 2, 200),
    ]


def test_tool_call_turn_counts_the_tool_call_and_the_follow_up() -> None:
    reply = ScriptedReply("Okay, the light is on.", tool_name="set_light", tool_arguments='{"on": true}')
    tl = run_virtual(stages(reply, tools=True))
    assert tl.ok, tl.error_message
    assert [(c.purpose, c.finish_reason, c.tool_name) for c in tl.calls] == [
        ("answer", "tool_calls", "set_light"),
        ("after_tool", "stop", ""),
    ]
    first, follow = tl.calls
    assert (ms(tl, first.start_ns), ms(tl, first.first_token_ns), ms(tl, first.end_ns)) == (2700, 2900, 2900)
    [tool] = tl.tools
    assert (tool.name, ms(tl, tool.start_ns), ms(tl, tool.end_ns)) == ("set_light", 2900, 2940)
    assert (ms(tl, follow.start_ns), ms(tl, follow.first_token_ns)) == (2940, 3140)
    assert [s.text for s in tl.sentences] == ["Okay, the light is on."]


def test_tools_offered_but_not_used_is_one_call() -> None:
    tl = run_virtual(stages(REPLY, tools=True))
    assert len(tl.calls) == 1 and tl.tools == []


def test_per_sentence_mode_with_a_tool_call() -> None:
    reply = ScriptedReply("Done. The light is on.", tool_name="set_light")
    tl = run_virtual(stages(reply, mode="per-sentence", tools=True))
    assert [c.purpose for c in tl.calls] == ["sentence", "after_tool", "sentence"]
    assert [s.text for s in tl.sentences] == ["Done.", "The light is on."]


def test_a_turn_over_its_time_limit_is_recorded_as_timeout() -> None:
    tl = run_virtual(stages(REPLY, ttft_ms=5000), timeout_s=4.0)
    assert (tl.ok, tl.error_type) == (False, "timeout")
    assert ms(tl, tl.end_ns) == 4000
    assert tl.calls and tl.calls[0].end_ns is None  # the call was cut off, and that is visible


def test_silence_only_is_no_speech() -> None:
    tl = run_virtual(stages(REPLY), frames=utterance(speech_frames=0))
    assert (tl.ok, tl.error_type) == (False, "no_speech")


def test_speech_until_the_end_of_the_audio_is_end_pointed_at_the_end() -> None:
    tl = run_virtual(stages(REPLY), frames=utterance(tail_frames=3))
    assert tl.ok
    assert ms(tl, tl.vad.user_speech_end_ns) == 1800
    assert ms(tl, tl.vad.end_ns) == 1980  # input ended 3 frames later


class Exploding:
    info = StageInfo(role="asr", impl="exploding")

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for _ in events:
            await asyncio.sleep(0.1)
            raise ConnectionResetError("peer went away")
        yield Transcript("never", "en")  # pragma: no cover


def test_a_failing_stage_fails_its_turn_with_the_error_class() -> None:
    server = stages(REPLY)
    broken = type(server)(server.vad, Exploding(), server.llm, server.sentences, server.tts)
    tl = run_virtual(broken)
    assert (tl.ok, tl.error_type, tl.error_message) == (False, "ConnectionResetError", "peer went away")
