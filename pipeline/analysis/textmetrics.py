"""Recognition and answer quality from text alone: CER/WER and expected-keyword hits.

Before scoring, reference and transcript are normalised alike: Unicode NFKC, lower case,
Traditional Chinese to Simplified (``zhconv``: Whisper often answers in Traditional
characters, which are not recognition errors), Chinese numerals to digits (``cn2an``: "三点"
and "3点" say the same), punctuation dropped. The edit distance is ``jiwer``'s: characters
for Chinese (CER), words otherwise (WER).
"""

from __future__ import annotations

import contextlib
import re
import unicodedata

import cn2an
import jiwer
import zhconv

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_WORD = re.compile(r"[a-z0-9']+")


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def _chinese(text: str) -> str:
    simplified = str(zhconv.convert(_normalise(text), "zh-cn"))
    with contextlib.suppress(ValueError, KeyError, IndexError):  # cn2an gives up on some mixes: scored as it is
        simplified = str(cn2an.transform(simplified, "cn2an"))
    return simplified


def units(text: str, language: str) -> list[str]:
    """Characters for Chinese (punctuation dropped), words for other languages."""
    if language.startswith("zh"):
        return [ch for ch in _chinese(text) if _CJK.match(ch) or ch.isalnum()]
    return _WORD.findall(_normalise(text))


def error_rate(reference: str, hypothesis: str, language: str) -> tuple[float, str] | None:
    """(rate, "cer" or "wer"), or None when there is no reference to score against."""
    ref = units(reference, language)
    if not ref:
        return None
    hyp = units(hypothesis, language)
    metric = "cer" if language.startswith("zh") else "wer"
    if not hyp:
        return 1.0, metric  # nothing recognised: every reference unit deleted
    # jiwer scores whitespace-separated words: each unit (a character or a word) is one here
    return float(jiwer.wer(" ".join(ref), " ".join(hyp))), metric


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
