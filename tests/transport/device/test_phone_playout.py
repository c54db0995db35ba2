"""A phone's playout buffer in front of a telephony bot (``phone_playout``), on virtual times, exact: audio that
comes faster than real time plays back to back, audio after the buffer ran dry plays on arrival, a pause of the
gap ends an answer and a shorter one does not, a clear cuts the answer where it was and echoes the marks it
dropped at once."""

from __future__ import annotations

import numpy as np

from pipeline.transport.device.phone_playout import GAP_MS, NS_PER_SAMPLE, HeardAnswer, Playout

MS = 1_000_000
LOUD, QUIET = 1000, 10  # over and under the audibility threshold (64)


def sound(ms: int, level: int = LOUD, quiet_head: int = 0, quiet_tail: int = 0) -> np.ndarray:
    """``ms`` of 8 kHz audio at ``level``, its first ``quiet_head`` and last ``quiet_tail`` samples quiet."""
    x = np.full(ms * 8, level, dtype=np.int16)
    x[:quiet_head] = QUIET
    if quiet_tail:
        x[-quiet_tail:] = QUIET
    return x


def edges(heard: HeardAnswer | None) -> tuple[int, int, bool, bool] | None:
    """An answer's edges as heard: first and last audible sample, over, cleared."""
    return None if heard is None else (heard.first_ns, heard.last_ns, heard.over, heard.cleared)


def test_audio_sent_faster_than_real_time_plays_back_to_back() -> None:
    p = Playout()
    for i in range(5):  # a second of answer, five chunks, all arriving within 4 ms of the first
        p.media(100 * MS + i * MS, sound(200, quiet_head=3 if i == 0 else 0, quiet_tail=5 if i == 4 else 0))
    assert [c.start_ns for c in p.chunks] == [100 * MS + i * 200 * MS for i in range(5)]
    heard = p.answer(0, now_ns=100 * MS + 1000 * MS + round(GAP_MS * MS))
    first, last = 100 * MS + 3 * NS_PER_SAMPLE, 100 * MS + 1000 * MS - 6 * NS_PER_SAMPLE
    assert edges(heard) == (first, last, True, False)
    # the media it was heard in: the first arrived at 100 ms and began to play then, the last arrived at 104 ms;
    # five chunks, a second of audio
    assert heard is not None
    assert (heard.received_first_ns, heard.received_last_ns, heard.started_ns) == (100 * MS, 104 * MS, 100 * MS)
    assert (heard.chunks, heard.played_ns) == (5, 1000 * MS)


def test_what_has_all_played_is_forgotten_and_the_queue_is_measured() -> None:
    p = Playout()
    p.media(0, sound(100))
    p.media(0, sound(100))  # plays from 100 ms
    assert p.queued_ns(50 * MS) == 150 * MS
    p.forget(100 * MS)  # the first has all played by then, the second has not begun
    assert [c.start_ns for c in p.chunks] == [100 * MS]
    assert p.queued_ns(300 * MS) == 0


def test_audio_after_the_buffer_ran_dry_plays_on_arrival() -> None:
    p = Playout()
    p.media(0, sound(20))
    late = p.media(500 * MS, sound(20))
    assert late.start_ns == 500 * MS  # not at 20 ms, where the buffer ran dry
    assert edges(p.answer(0, now_ns=600 * MS)) == (0, 500 * MS + 159 * NS_PER_SAMPLE, False, False)


def test_a_pause_of_the_gap_ends_an_answer_a_shorter_one_does_not() -> None:
    gap = round(GAP_MS * MS)
    end_of_first = 200 * MS - NS_PER_SAMPLE  # the first burst's last sample
    shorter, longer = Playout(), Playout()
    for p, pause in ((shorter, gap - NS_PER_SAMPLE), (longer, gap)):
        p.media(0, sound(200))
        p.media(end_of_first + pause, sound(100))  # its first sample, the pause after the first burst's last
    second_last = end_of_first + gap + 800 * NS_PER_SAMPLE - NS_PER_SAMPLE
    assert edges(shorter.answer(0, now_ns=second_last + gap)) == (0, second_last - NS_PER_SAMPLE, True, False)
    assert edges(longer.answer(0, now_ns=second_last + gap)) == (0, end_of_first, True, False)
    # not over while the gap has not passed: the next sentence may still come
    assert edges(longer.answer(0, now_ns=end_of_first + gap - 1)) == (0, end_of_first, False, False)


def test_an_answer_is_looked_for_after_the_question() -> None:
    p = Playout()
    p.media(0, sound(100))  # the previous answer
    p.media(2000 * MS, sound(100))
    heard = p.answer(50 * MS, now_ns=3000 * MS)  # from mid-way through the first: the rest of it is that answer
    assert heard is not None and heard.first_ns == 50 * MS and heard.last_ns == 100 * MS - NS_PER_SAMPLE
    heard = p.answer(101 * MS, now_ns=3000 * MS)
    assert edges(heard) == (2000 * MS, 2100 * MS - NS_PER_SAMPLE, True, False)
    assert p.answer(101 * MS, now_ns=1999 * MS) is None  # nothing played since the question yet


def test_a_clear_cuts_the_answer_where_it_was_and_echoes_the_marks_it_dropped() -> None:
    p = Playout()
    p.media(0, sound(1000))  # queued at once: plays until 1000 ms
    assert p.mark(1 * MS, "first-sentence") == 1000 * MS
    p.media(2 * MS, sound(500))
    assert p.mark(3 * MS, "second-sentence") == 1500 * MS
    assert p.echoes(999 * MS) == []
    p.clear(400 * MS)  # the caller spoke over it (a barge-in), the bot cleared
    assert [c.samples for c in p.chunks] == [400 * 8]  # the second chunk never plays, the first stops at 400 ms
    assert p.free_ns == 400 * MS
    assert p.echoes(400 * MS) == [("first-sentence", 400 * MS), ("second-sentence", 400 * MS)]
    assert edges(p.answer(0, now_ns=400 * MS)) == (0, 400 * MS - NS_PER_SAMPLE, True, True)
    after = p.media(450 * MS, sound(10))  # what the bot says next plays from its arrival
    assert after.start_ns == 450 * MS


def test_a_mark_is_echoed_once_its_audio_has_played() -> None:
    p = Playout()
    p.media(0, sound(300))
    p.mark(5 * MS, "end")
    assert p.echoes(299 * MS) == []
    assert p.echoes(300 * MS) == [("end", 300 * MS)]
    assert p.echoes(10_000 * MS) == []  # once
    assert p.mark(20_000 * MS, "idle") == 20_000 * MS  # nothing queued: due on arrival


def test_quiet_audio_is_not_an_answer() -> None:
    p = Playout()
    p.media(0, sound(500, level=QUIET))
    assert p.answer(0, now_ns=10_000 * MS) is None
