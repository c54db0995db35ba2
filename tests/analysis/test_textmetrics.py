import pytest

from pipeline.analysis.textmetrics import error_rate, keyword_score


def test_traditional_characters_and_numerals_are_not_recognition_errors() -> None:
    assert error_rate("熊猫喜欢吃什么？", "熊貓喜歡吃什麼?", "zh") == (0.0, "cer")
    assert error_rate("现在三点了。", "现在3点了", "zh") == (0.0, "cer")
    assert error_rate("kitten", "sitting", "en") == (1.0, "wer")


def test_nothing_recognised_is_every_unit_missed() -> None:
    assert error_rate("打开灯", "", "zh") == (1.0, "cer")


def test_chinese_is_scored_by_characters_without_punctuation() -> None:
    scored = error_rate("打开客厅的灯。", "打开客厅灯", "zh")
    assert scored is not None and scored[0] == pytest.approx(1 / 6) and scored[1] == "cer"


def test_english_is_scored_by_words_case_and_punctuation_free() -> None:
    assert error_rate("Turn on the kitchen light.", "turn on the kitchen lights", "en") == (0.2, "wer")


def test_no_reference_no_score() -> None:
    assert error_rate("", "anything", "en") is None


def test_keyword_groups() -> None:
    assert keyword_score("The kitchen light is on.", "light|灯;on|开") == 1.0
    assert keyword_score("好的，灯关了。", "light|灯;on|开") == 0.5
    assert keyword_score("whatever", "") is None
