"""The real server's two ways of cleaning text, character for character: for the ``stt`` message, and for
telling a wake word (xiaozhi-esp32-server ``core/utils/textUtils.py``, ``core/utils/util.py``)."""

from __future__ import annotations

# textUtils.get_string_no_punctuation_or_emoji: stripped from both ends only, with whitespace and emoji
_STT_EDGE = frozenset('，,。.！!“”"：:-－、[]【】')
_EMOJI_RANGES = (
    (0x1F600, 0x1F64F),
    (0x1F300, 0x1F5FF),
    (0x1F680, 0x1F6FF),
    (0x1F900, 0x1F9FF),
    (0x1FA70, 0x1FAFF),
    (0x2600, 0x26FF),
    (0x2700, 0x27BF),
)
# util.remove_punctuation_and_length: removed everywhere; the full-width full stop U+FF0E is not in its set
_WAKE_DROPPED = frozenset(
    "！＂＃＄％＆＇（）＊＋，－。／：；＜＝＞？＠［＼］＾＿｀｛｜｝～"
    + "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
    + " \u3000"
)


def _edge(ch: str) -> bool:
    return ch.isspace() or ch in _STT_EDGE or any(lo <= ord(ch) <= hi for lo, hi in _EMOJI_RANGES)


def stt_text(text: str) -> str:
    """What the real server shows the device of a transcript: punctuation, spaces and emoji cut from
    both ends; the inside, and a question mark at the end, kept."""
    start, end = 0, len(text)
    while start < end and _edge(text[start]):
        start += 1
    while end > start and _edge(text[end - 1]):
        end -= 1
    return text[start:end]


def wake_text(text: str) -> str:
    """A detect's text as the real server compares it with its wake words: ASCII and full-width
    punctuation and spaces removed everywhere; exactly "Yeah" counts as nothing."""
    result = "".join(ch for ch in text if ch not in _WAKE_DROPPED)
    return "" if result == "Yeah" else result
