"""Writes minimal GGUF headers (metadata only) for tests of model validation."""

from __future__ import annotations

import struct
from pathlib import Path

_STRING, _UINT32 = 8, 4


def _str(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def write_gguf(path: Path, metadata: dict[str, str | int]) -> Path:
    body = b""
    for key, value in metadata.items():
        if isinstance(value, int):
            body += _str(key) + struct.pack("<I", _UINT32) + struct.pack("<I", value)
        else:
            body += _str(key) + struct.pack("<I", _STRING) + _str(value)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(metadata)) + body)
    return path
