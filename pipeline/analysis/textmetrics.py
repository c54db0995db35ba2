"""Recognition and answer quality from text alone: CER/WER and expected-keyword hits."""

from __future__ import annotations

import re
import unicodedata

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_WORD = re.compile(r"[a-z0-9']+")


def edit_distance(a: list[str], b: list[str]) -> int:
    """Levenshtein distance between two token lists."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        cur = [i]
        for j, y in enumerate(b, start=1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def units(text: str, language: str) -> list[str]:
    """Characters for Chinese (punctuation dropped), words for other languages."""
    text = _normalise(text)
    if language.startswith("zh"):
        return [ch for ch in text if _CJK.match(ch) or ch.isalnum()]
    return _WORD.findall(text)


def error_rate(reference: str, hypothesis: str, language: str) -> tuple[float, str] | None:
    """(rate, "cer" or "wer"), or None when there is no reference to score against."""
    ref = units(reference, language)
    if not ref:
        return None
    metric = "cer" if language.startswith("zh") else "wer"
    return edit_distance(ref, units(hypothesis, language)) / len(ref), metric


def keyword_score(answer: str, expected: str) -> float | None:
    """Share of expected keyword groups found in the answer.

    ``expected`` is ``;``-separated groups of ``|``-separated alternatives, e.g.
    ``灯|light;开|on``; a group counts when any alternative occurs.
    """
    groups = [[alt.strip() for alt in group.split("|") if alt.strip()] for group in expected.split(";")]
    groups = [g for g in groups if g]
    if not groups:
        return None
    text = _normalise(answer)
    hits = sum(1 for group in groups if any(_normalise(alt) in text for alt in group))
    return hits / len(groups)
