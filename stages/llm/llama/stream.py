"""Raw token text of one llama.cpp call -> the contract's events, as each token arrives.

Spoken text is released token by token; only output that may still become a tool call is
held (``stages.llm.toolcall``), and a tool call is announced the moment the output must be
one, then handed on whole when the call ends. The first token of the call is marked with an
empty ``TokenDelta`` (the call's first chunk), whatever it turns out to be. In per-sentence
mode the call is cut at its first sentence end.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterable, AsyncIterator

from pipeline.events import CallEnd, TokenDelta
from stages.llm.backend import ChatRequest, Chunk
from stages.llm.llama.engine import Finished
from stages.llm.toolcall import OutputSorter
from stages.sentences import SplitRules, find_cut

_SENTENCE_RULES = SplitRules(first_cut_at_comma=False, max_chars=10_000)

Item = str | Finished


class _Call:
    """One call's output: sorted into speech and a tool call; speech cut at a sentence end if asked."""

    def __init__(self, request: ChatRequest, cancel: threading.Event) -> None:
        self.request = request
        self.cancel = cancel
        self.sorter = OutputSorter(t.name for t in request.tools)
        self.said = ""  # text already passed on
        self.cut = False  # per-sentence mode: the sentence is complete, the rest is dropped

    def token(self, text: str) -> list[Chunk]:
        if self.cut:
            return []
        events, speech = self.sorter.feed(text)
        out: list[Chunk] = [*events]
        if speech:
            out += self._speak(speech)
        return out

    def _speak(self, text: str) -> list[Chunk]:
        if self.request.stop_at_sentence:
            end = find_cut(self.said + text, _SENTENCE_RULES, first=False, final=False)
            if end is not None:
                keep = end - len(self.said)
                self.cut = True
                self.cancel.set()
                return [TokenDelta(text[:keep])] if keep > 0 else []
        self.said += text
        return [TokenDelta(text)]

    def end(self, done: Finished) -> list[Chunk]:
        out: list[Chunk] = []
        finish = done.finish_reason
        call, leftover = self.sorter.finish()
        if call is not None:
            out.append(call)
            finish = "tool_calls"
        elif leftover.strip() and not self.cut:
            out.append(TokenDelta(leftover))
        complete = not self.cut and finish != "length"
        out.append(
            CallEnd(
                finish,
                done.output_tokens,
                input_tokens=done.prompt_tokens,
                cached_tokens=done.cached_tokens,
                answer_complete=complete,
                server_timings=done.timings,
            )
        )
        return out


async def shape(items: AsyncIterable[Item], request: ChatRequest, cancel: threading.Event) -> AsyncIterator[Chunk]:
    call = _Call(request, cancel)
    first = True
    async for item in items:
        if isinstance(item, Finished):
            for chunk in call.end(item):
                yield chunk
            return
        if first:
            first = False
            yield TokenDelta("")  # the call's first chunk: the model has produced its first token
        for chunk in call.token(item):
            yield chunk
