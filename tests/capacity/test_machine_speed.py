"""The machine's speed probe: four fixed pieces of work timed, the ONNX one not measured without its model."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.capacity import machine_speed
from pipeline.settings.models import ModelError


def test_each_piece_is_timed() -> None:
    found = machine_speed.measure()
    assert found.json_ms > 0 and found.socket_ms > 0
    assert found.opus_ms is not None and found.opus_ms > 0  # libopus is a core dependency


def test_without_the_vad_model_the_onnx_piece_is_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(model: str, cache: Path) -> Path:
        raise ModelError(f"model {model!r} needs the package silero-vad")

    monkeypatch.setattr("pipeline.settings.models.resolve", missing)
    assert machine_speed.onnx_session() is None
    assert machine_speed.measure().onnx_ms is None


@pytest.mark.real
def test_the_onnx_piece_runs_silero() -> None:
    work = machine_speed.onnx_session()
    assert work is not None
    work()  # the model's inputs as the lab's VAD gives them: it would raise on a wrong name or shape
