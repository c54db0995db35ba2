"""scripts/bench_sound.py's pure part: the recording's silences against the traces', one line per trace column
compared, named in the line. No sound server is started: the bench itself runs the turns."""

from __future__ import annotations

from labtools.script_module import load_script

bench = load_script("bench_sound")  # the script's own logic, loaded from its file


def test_each_trace_column_compared_is_its_own_named_line() -> None:
    by_column = {"true_end_first_audible_ms": [3.0, -2.0], "first_audible_ms": [-2.5]}
    assert bench.acoustic_result(by_column) == {
        "acoustic - trace true_end_first_audible_ms (ms)": [3.0, -2.0],
        "acoustic - trace first_audible_ms (ms)": [-2.5],
    }
    assert bench.summary("acoustic - trace true_end_first_audible_ms (ms)", [3.0, -2.0]) == (
        "  acoustic - trace true_end_first_audible_ms (ms): n=2 median 0.5 min -2.0 max 3.0 worst |3.0|"
    )


def test_nothing_compared_still_says_so() -> None:
    assert bench.acoustic_result({}) == {"acoustic - trace silence (ms)": []}
    assert bench.summary("acoustic - trace silence (ms)", []) == "  acoustic - trace silence (ms): none"
