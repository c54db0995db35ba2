"""The in-process llama backend's stream shaping, on token sequences a model really produced (no model needed):
spoken text is released token by token, only what may become a tool call is held, a tool call comes whole."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import pytest

from pipeline.events import CallEnd, OutputStart, TokenDelta, ToolCall, ToolCallDelta
from stages.llm.backend import ChatRequest, Chunk, Message
from stages.llm.llama.engine import Finished
from stages.llm.llama.stream import Item, shape
from stages.llm.prompts import DEVICE_TOOLS
from stages.llm.toolcall import Reading, ToolCallDetector

ASK = (Message("user", "hi"),)
WITH_TOOLS = ChatRequest(ASK, 64, tools=DEVICE_TOOLS)
DONE = Finished("stop", 0, 230, 222, ())
# what Qwen2.5-Coder-0.5B said here, token by token (probed with the packaged model)
BARE_TOOL = ['{"', "name", '":', ' "', "set", "_light", '",', ' "', "arguments", '":', ' {"', "on", '":', " true", "}}"]
TAGGED_TOOL = ["<tool_call>", "\n", '{"name": "set_volume", "arguments": {"level": 30}}', "\n", "</tool_call>"]
ECHO = ['{"', "ok", '":', " true", "}"]
ANSWER = ["The", " capital", " of", " France", " is", " Paris", "."]


def run(request: ChatRequest, tokens: list[str], done: Finished = DONE) -> list[Chunk]:
    async def main() -> list[Chunk]:
        async def items() -> AsyncIterator[Item]:
            for token in tokens:
                yield token
            yield done

        return [c async for c in shape(items(), request, threading.Event())]

    return asyncio.run(main())


@pytest.mark.parametrize(
    ("text", "reading"),
    [
        ("", Reading.MAYBE),
        (" \n", Reading.MAYBE),
        ("<tool", Reading.MAYBE),
        ("<tool_call>", Reading.TOOL),
        ('{"', Reading.MAYBE),
        ('{"name": "set', Reading.MAYBE),
        ('{"name": "set_light"', Reading.TOOL),
        ('{"name": "weather"', Reading.TEXT),  # not an offered tool
        ('{"ok', Reading.TEXT),
        ("The", Reading.TEXT),
    ],
)
def test_the_detector_holds_only_what_may_still_become_a_tool_call(text: str, reading: Reading) -> None:
    assert ToolCallDetector(t.name for t in DEVICE_TOOLS).read(text) is reading


def test_a_spoken_answer_streams_one_delta_per_token_even_with_tools_offered() -> None:
    out = run(WITH_TOOLS, ANSWER)
    assert out[:2] == [TokenDelta(""), OutputStart()]
    assert [c.text for c in out if isinstance(c, TokenDelta) and c.text] == ANSWER
    assert isinstance(out[-1], CallEnd) and out[-1].finish_reason == "stop"
    assert (out[-1].input_tokens, out[-1].cached_tokens) == (230, 222)


def test_a_bare_json_tool_call_is_announced_then_handed_on_whole() -> None:
    out = run(WITH_TOOLS, BARE_TOOL)
    assert out[:2] == [TokenDelta(""), OutputStart()]  # the first output, stamped at the first token
    pieces = [c for c in out if isinstance(c, ToolCallDelta)]
    assert "".join(p.text for p in pieces) == "".join(BARE_TOOL)
    assert not [c for c in out if isinstance(c, TokenDelta) and c.text]  # never spoken
    assert out[-2] == ToolCall("set_light", '{"on": true}')
    assert isinstance(out[-1], CallEnd) and out[-1].finish_reason == "tool_calls"


def test_a_tagged_tool_call_is_recognised_at_its_tag() -> None:
    out = run(WITH_TOOLS, TAGGED_TOOL)
    assert out[2] == ToolCallDelta("<tool_call>")
    assert out[-2] == ToolCall("set_volume", '{"level": 30}')


def test_json_that_is_not_a_tool_call_is_released_as_soon_as_it_cannot_be_one() -> None:
    out = run(WITH_TOOLS, ECHO)
    texts = [c.text for c in out if isinstance(c, TokenDelta) and c.text]
    assert texts == ['{"ok', '":', " true", "}"]  # held for one token only


def test_without_tools_nothing_is_held() -> None:
    out = run(ChatRequest(ASK, 64), ECHO)
    assert [c.text for c in out if isinstance(c, TokenDelta) and c.text] == ECHO


def test_per_sentence_mode_cuts_at_the_first_sentence_end() -> None:
    request = ChatRequest(ASK, 64, stop_at_sentence=True)
    out = run(request, ["It", " is", " sunny", ".", " Take", " a", " hat", "."])
    assert "".join(c.text for c in out if isinstance(c, TokenDelta)) == "It is sunny."
    assert isinstance(out[-1], CallEnd) and out[-1].answer_complete is False
