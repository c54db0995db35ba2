"""End-of-turn settings: the VAD in words from its recorded settings, and who beats whom (a tie beats nothing)."""

from __future__ import annotations

import numpy as np

from pipeline.analysis.proportions import proportion
from pipeline.report.cutoffs import EndSetting, beaten_by, on_frontier, vad_words


def test_the_recorded_vad_in_words() -> None:
    assert (
        vad_words({"impl": "silero", "silence_ms": 600, "threshold": 0.5, "profile": "lab"}) == "silero, silence 600 ms"
    )
    assert vad_words({"impl": "ten", "silence_ms": 450}) == "ten, silence 450 ms"
    stacked = {"impl": "smart-turn", "inner": "silero", "inner_silence_ms": 200, "max_silence_ms": 3000}
    assert vad_words(stacked) == "smart-turn on silero, pause 200 ms, at most 3000 ms"
    # the server's profile ends the turn on its own silence, not the lab's
    server = {"impl": "silero", "silence_ms": 600, "profile": "xiaozhi-server", "xiaozhi_server": {"silence_ms": 200}}
    assert vad_words(server) == "silero (xiaozhi-server profile), silence 200 ms"
    assert vad_words({"impl": "manual"}) == "manual"
    assert vad_words({"silence_ms": 600}) is None


def point(label: str, cut: int, silences: list[float]) -> EndSetting:
    empty = np.array([], dtype=np.float64)
    values = np.sort(np.asarray(silences, dtype=np.float64))
    return EndSetting("B", label, label, (), proportion(cut, 10), values, empty, empty, ())


def test_the_frontier_keeps_what_nothing_beats_on_both() -> None:
    quick, patient, worse = point("quick", 4, [500.0]), point("patient", 1, [900.0]), point("worse", 2, [1300.0])
    tie = point("tie", 1, [1300.0])  # as few cut off as patient, slower: patient does not beat it
    none = point("none", 0, [])  # no silence: placed nowhere, beats nothing
    settings = [quick, patient, worse, tie, none]
    assert on_frontier(settings) == [True, True, False, True, False]
    assert beaten_by(worse, settings) is patient
    assert beaten_by(tie, settings) is None and beaten_by(none, settings) is None
