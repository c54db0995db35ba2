"""Cuts a streamed LLM answer into sentences for TTS, as soon as each is complete.

Handles Chinese and English end punctuation, an optional early cut of the first
sentence at a comma (as xiaozhi does, so speech starts sooner), and a maximum
sentence length. A sentence remembers which delta it began in, so the timing
wrapper can find that delta's arrival time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from pipeline.events import CallEnd, CallStart, Event, Sentence, StageInfo, TokenDelta

CJK_ENDS = "。！？；…\n"
ASCII_ENDS = ".!?;"
COMMAS = "，,、"
CLOSERS = "\"'”’）)】」』"


@dataclass(frozen=True, slots=True)
class SplitRules:
    """Where a sentence may end besides its end punctuation: the first one at a comma, any one at ``max_chars``."""

    first_cut_at_comma: bool = True
    min_first_chars: int = 4  # a comma earlier than this does not cut the first sentence
    max_chars: int = 80

    def __post_init__(self) -> None:
        if self.max_chars < 8:
            raise ValueError(f"max_chars must be at least 8, got {self.max_chars}")
        if self.min_first_chars < 1:
            raise ValueError(f"min_first_chars must be at least 1, got {self.min_first_chars}")


def find_cut(text: str, rules: SplitRules, first: bool, final: bool) -> int | None:
    """Index just after the first complete sentence in ``text``, or None if none is complete yet.

    ``final`` says no more text will come, so an ASCII full stop at the very end counts.
    """
    for i, ch in enumerate(text):
        if ch in CJK_ENDS:
            return _after_closers(text, _after_run(text, i, ch))
        if ch in ASCII_ENDS:
            if i + 1 < len(text):
                nxt = text[i + 1]
                if nxt.isspace() or nxt in CLOSERS:
                    return _after_closers(text, i + 1)
                if ch == "." and not nxt.isalnum():
                    return _after_closers(text, _after_run(text, i, ch))
            elif final:
                return i + 1
        if first and _early_comma(text, i, rules):
            return i + 1
        if i >= rules.max_chars:
            return _soft_cut(text, rules.max_chars)
    return None


def _early_comma(text: str, i: int, rules: SplitRules) -> bool:
    """A comma that may end the first sentence: late enough, and an ASCII one followed by a space."""
    ch = text[i]
    if not rules.first_cut_at_comma or ch not in COMMAS or len(text[:i].strip()) < rules.min_first_chars:
        return False
    return ch != "," or (i + 1 < len(text) and text[i + 1].isspace())


def _after_run(text: str, i: int, ch: str) -> int:
    j = i + 1
    while j < len(text) and text[j] == ch:
        j += 1
    return j


def _after_closers(text: str, j: int) -> int:
    while j < len(text) and text[j] in CLOSERS:
        j += 1
    return j


def _soft_cut(text: str, limit: int) -> int:
    """Cut an over-long sentence at its last space or comma within the limit, else hard at the limit."""
    for j in range(limit, limit // 2, -1):  # text[j] is the first character past the cut
        if text[j].isspace() or text[j - 1] in COMMAS:
            return j
    return limit


class SentenceSplitter:
    """The sentences stage: token deltas in, one ``Sentence`` out as soon as each is complete, marked with the delta
    it began in."""

    def __init__(self, rules: SplitRules = SplitRules()) -> None:
        self.rules = rules
        self.info = StageInfo(
            role="sentences",
            impl="punctuation",
            attributes=(
                ("sentences.first_cut_at_comma", rules.first_cut_at_comma),
                ("sentences.max_chars", rules.max_chars),
            ),
        )

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        buf = ""
        owners: list[int] = []  # for each char in buf, the position of the delta it came in
        call = 0  # the call the deltas belong to (the last CallStart seen)
        pos = 0  # deltas seen so far in this call
        count = 0
        async for event in events:
            if isinstance(event, CallStart):
                call, pos = event.index, 0
                continue
            if isinstance(event, TokenDelta):
                text = event.text if buf else event.text.lstrip()
                buf += text
                owners += [pos] * len(text)
                pos += 1
                final = False
            elif isinstance(event, CallEnd):
                final = True
            else:
                continue
            while True:
                cut = find_cut(buf, self.rules, first=count == 0, final=final)
                if cut is None and final and buf.strip():
                    cut = len(buf)
                if cut is None:
                    break
                piece, first_owner = buf[:cut].rstrip(), owners[0]
                rest = buf[cut:]
                lead = len(rest) - len(rest.lstrip())  # a sentence starts at its first visible character
                buf, owners = rest[lead:], owners[cut + lead :]
                if piece.strip(CJK_ENDS + ASCII_ENDS + COMMAS + CLOSERS + " "):
                    yield Sentence(index=count, text=piece, call_index=call, first_token=first_owner)
                    count += 1
            if final:
                buf, owners = "", []
