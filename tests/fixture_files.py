"""Small fixture folders written by tests: tone 'speech' in WAV files and a manifest."""

from __future__ import annotations

import csv
import math
import wave
from pathlib import Path

import numpy as np


def tone_clip(
    rate: int = 16000, channels: int = 1, lead_s: float = 0.6, speech_s: float = 1.2, tail_s: float = 1.2
) -> bytes:
    n = int(rate * (lead_s + speech_s + tail_s))
    t = np.arange(n) / rate
    voiced = (t >= lead_s) & (t < lead_s + speech_s)
    mono = np.where(voiced, 0.25 * np.sin(2 * math.pi * 300 * t), 0.0)
    pcm = (mono * 32767).astype("<i2")
    return np.repeat(pcm, channels).tobytes()


def write_wav(path: Path, rate: int = 16000, channels: int = 1, **kw: float) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(channels)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(tone_clip(rate, channels, **kw))


def write_manifest(folder: Path, rows: list[tuple[str, str, str, str]]) -> None:
    """rows: (id, language, category, text)."""
    with (folder / "manifest.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "language", "category", "text"])
        writer.writerows(rows)


def make_fixtures(folder: Path, ids: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for qid in ids:
        write_wav(folder / f"{qid}.wav")
    write_manifest(folder, [(qid, "en", "knowledge", f"Question {qid}?") for qid in ids])
    return folder
