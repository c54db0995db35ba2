from collections.abc import Sequence

from pipeline.events import CallEnd, Event, Sentence, TokenDelta
from stages.sentences import SentenceSplitter, SplitRules, find_cut
from tests.harness import run_stage

NO_COMMA = SplitRules(first_cut_at_comma=False)


def split(deltas: Sequence[str], rules: SplitRules = NO_COMMA) -> list[Sentence]:
    answer: list[Event] = [TokenDelta(text=text) for text in deltas]
    return run_stage(SentenceSplitter(rules), [*answer, CallEnd(finish_reason="stop", output_tokens=len(deltas))]).of(
        Sentence
    )


def test_chinese_end_punctuation_cuts() -> None:
    out = split(["今天", "天气", "很好。", "我们", "去", "公园", "吧！", "好", "吗？"])
    assert [s.text for s in out] == ["今天天气很好。", "我们去公园吧！", "好吗？"]
    assert [s.first_token for s in out] == [0, 3, 7]


def test_english_sentences_need_the_next_character_to_confirm_a_full_stop() -> None:
    out = split(["It", " costs", " 3", ".", "5", " dollars", ".", " Buy", " it", "?", " Yes"])
    assert [s.text for s in out] == ["It costs 3.5 dollars.", "Buy it?", "Yes"]
    assert [s.first_token for s in out] == [0, 7, 10]


def test_semicolon_ellipsis_and_closing_quotes() -> None:
    assert [s.text for s in split(["他说：“走吧。”然后", "走了……真的；", "好"])] == [
        "他说：“走吧。”",
        "然后走了……",
        "真的；",
        "好",
    ]


def test_first_sentence_cut_early_at_a_comma_only_once() -> None:
    rules = SplitRules(first_cut_at_comma=True, min_first_chars=2)
    out = split(["好的，", "我来", "看看，", "明天", "会下雨。"], rules)
    assert [s.text for s in out] == ["好的，", "我来看看，明天会下雨。"]
    english = split(["Well", ",", " let", " me", " see", ",", " it", " rains", "."], rules)
    assert [s.text for s in english] == ["Well,", "let me see, it rains."]


def test_a_comma_too_early_does_not_cut() -> None:
    rules = SplitRules(first_cut_at_comma=True, min_first_chars=4)
    assert [s.text for s in split(["好，", "今天", "下雨。"], rules)] == ["好，今天下雨。"]


def test_over_long_sentences_are_cut_at_a_space_or_at_the_limit() -> None:
    rules = SplitRules(first_cut_at_comma=False, max_chars=20)
    words = ["one", " two", " three", " four", " five", " six", " seven", " eight"]
    out = split(words, rules)
    assert [s.text for s in out] == ["one two three four", "five six seven eight"]
    assert all(len(s.text) <= 20 for s in out)
    assert [s.text for s in split(["一二三四五六七八九十" * 3], rules)] == [
        "一二三四五六七八九十一二三四五六七八九十",
        "一二三四五六七八九十",
    ]


def test_find_cut_waits_for_more_text_before_an_ascii_full_stop() -> None:
    assert find_cut("Pi is 3.", NO_COMMA, first=False, final=False) is None
    assert find_cut("Pi is 3.", NO_COMMA, first=False, final=True) == 8


def test_punctuation_only_pieces_are_dropped_and_indices_stay_dense() -> None:
    out = split(["你好。", "。", "再见。"])
    assert [(s.index, s.text) for s in out] == [(0, "你好。"), (1, "再见。")]
