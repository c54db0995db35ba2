"""Reads a GGUF file's header metadata without loading the model.

Enough to refuse, before a run starts, a file that is not GGUF, is truncated,
or is a base model without a chat template, and to name the quantisation.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# GGUF value types
_UINT8, _INT8, _UINT16, _INT16, _UINT32, _INT32, _FLOAT32, _BOOL, _STRING, _ARRAY, _UINT64, _INT64, _FLOAT64 = range(13)
_SCALARS = {
    _UINT8: "<B",
    _INT8: "<b",
    _UINT16: "<H",
    _INT16: "<h",
    _UINT32: "<I",
    _INT32: "<i",
    _FLOAT32: "<f",
    _BOOL: "<?",
    _UINT64: "<Q",
    _INT64: "<q",
    _FLOAT64: "<d",
}

# llama.cpp's general.file_type values for the common quantisations
FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    32: "BF16",
}

Value = str | int | float | bool | list["Value"]


class GgufError(ValueError):
    """The file cannot be a model: missing, not GGUF, an unknown version, or a truncated or corrupt header."""


@dataclass(frozen=True, slots=True)
class GgufInfo:
    """What the header says about a model: enough to check it before loading it and to name it in the record."""

    path: Path
    architecture: str
    name: str
    quantisation: str
    context_length: int
    chat_template: str

    @property
    def is_chat_model(self) -> bool:
        return bool(self.chat_template.strip())


def _read(fh: BinaryIO, n: int, path: Path) -> bytes:
    data = fh.read(n)
    if len(data) != n:
        raise GgufError(f"{path}: truncated GGUF header")
    return data


def _string(fh: BinaryIO, path: Path) -> str:
    (length,) = struct.unpack("<Q", _read(fh, 8, path))
    if length > 1 << 26:
        raise GgufError(f"{path}: corrupt GGUF header (string of {length} bytes)")
    return _read(fh, length, path).decode("utf-8", errors="replace")


def _value(fh: BinaryIO, kind: int, path: Path, keep: bool) -> Value:
    if kind in _SCALARS:
        fmt = _SCALARS[kind]
        (v,) = struct.unpack(fmt, _read(fh, struct.calcsize(fmt), path))
        return v  # type: ignore[no-any-return]
    if kind == _STRING:
        return _string(fh, path)
    if kind == _ARRAY:
        (item_kind,) = struct.unpack("<I", _read(fh, 4, path))
        (count,) = struct.unpack("<Q", _read(fh, 8, path))
        if item_kind in _SCALARS and not keep:
            fh.seek(count * struct.calcsize(_SCALARS[item_kind]), 1)  # skip big arrays (token scores...)
            return []
        return [_value(fh, item_kind, path, keep) for _ in range(count)] if keep else _skip(fh, item_kind, count, path)
    raise GgufError(f"{path}: corrupt GGUF header (value type {kind})")


def _skip(fh: BinaryIO, kind: int, count: int, path: Path) -> list[Value]:
    for _ in range(count):
        _value(fh, kind, path, keep=False)
    return []


def read_gguf(path: Path) -> GgufInfo:
    """Header metadata of a GGUF file; a clear GgufError for anything else."""
    if not path.is_file():
        raise GgufError(f"{path}: model file not found")
    meta: dict[str, Value] = {}
    with path.open("rb") as fh:
        if fh.read(4) != b"GGUF":
            raise GgufError(f"{path}: not a GGUF file (bad magic)")
        (version,) = struct.unpack("<I", _read(fh, 4, path))
        if version not in (2, 3):
            raise GgufError(f"{path}: unsupported GGUF version {version}")
        _tensors, kv_count = struct.unpack("<QQ", _read(fh, 16, path))
        for _ in range(kv_count):
            key = _string(fh, path)
            (kind,) = struct.unpack("<I", _read(fh, 4, path))
            meta[key] = _value(fh, kind, path, keep=not key.startswith("tokenizer.ggml."))
    arch = str(meta.get("general.architecture", ""))
    file_type = meta.get("general.file_type")
    return GgufInfo(
        path=path,
        architecture=arch,
        name=str(meta.get("general.name", path.stem)),
        quantisation=FILE_TYPES.get(file_type, f"type {file_type}") if isinstance(file_type, int) else "unknown",
        context_length=int(meta.get(f"{arch}.context_length", 0) or 0),  # type: ignore[arg-type]
        chat_template=str(meta.get("tokenizer.chat_template", "")),
    )
