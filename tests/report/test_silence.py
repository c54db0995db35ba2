"""The one rule of which trace column a turn's silence comes from: a device's first audible sample, else (in
one process) the playback's start; ``silence_ms`` and the recording's check both read it."""

from __future__ import annotations

from pipeline.records.turn_row import TurnRow
from pipeline.report.silence import Silence, silence_ms, silence_of


def test_a_devices_turn_is_silent_until_its_first_audible_sample() -> None:
    row = TurnRow(run_id="r1", transport="websocket", first_audible_ms=812.5, first_audio_ms=640.0)
    assert silence_of(row) == Silence("first_audible_ms", 812.5) and silence_ms(row) == 812.5


def test_a_device_that_heard_nothing_has_no_silence_rather_than_its_servers_playback() -> None:
    row = TurnRow(run_id="r1", transport="websocket", first_audio_ms=640.0)
    assert silence_of(row) == Silence("first_audible_ms", None) and silence_ms(row) is None


def test_in_one_process_the_silence_ends_where_the_playback_starts() -> None:
    row = TurnRow(run_id="r1", first_audio_ms=640.0)
    assert silence_of(row) == Silence("first_audio_ms", 640.0) and silence_ms(row) == 640.0
    assert silence_of(TurnRow(run_id="r1")) == Silence("first_audio_ms", None)


def test_a_first_audible_sample_without_a_transport_is_still_the_devices() -> None:
    row = TurnRow(run_id="r1", first_audible_ms=700.0, first_audio_ms=640.0)
    assert silence_of(row) == Silence("first_audible_ms", 700.0)
