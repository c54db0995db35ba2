"""Reads a fixtures folder: the question manifest and the audio of each question.

``manifest.csv`` columns: ``id, language, category, text`` (required) and
``audio`` (default ``<id>.wav``), ``answer``, ``tool``, ``tool_arguments``
(used by the scripted LLM) and ``keywords`` (what a good answer contains).
Audio is WAV; other sample rates and stereo are converted to 16 kHz mono, and
the conversion is noted on the turn's row.
"""

from __future__ import annotations

import csv
import hashlib
import wave
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.events import FRAME_BYTES, FRAME_MS, SAMPLE_RATE, AudioFrame

MANIFEST = "manifest.csv"
REQUIRED = ("id", "language", "category", "text")
OPTIONAL = ("audio", "answer", "tool", "tool_arguments", "keywords")


class FixtureError(ValueError):
    """The folder cannot be used at all (missing, no manifest, no audio)."""


class BadAudio(ValueError):
    """One audio file cannot be used; its turn is recorded as ``bad_audio``."""


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    language: str
    category: str
    text: str
    audio: Path
    answer: str = ""
    tool: str = ""
    tool_arguments: str = "{}"
    keywords: str = ""  # expected in a good answer: ";"-separated groups of "|"-separated alternatives


@dataclass(frozen=True, slots=True)
class QuestionSet:
    folder: Path
    questions: tuple[Question, ...]
    warnings: tuple[str, ...] = field(default=())

    def digest(self) -> str:
        """Identifies the set, its order and its audio content (M5: same set, same order)."""
        h = hashlib.sha256()
        for q in self.questions:
            h.update(f"{q.id}\0{q.language}\0{q.text}\0{q.answer}\0{q.tool}\0".encode())
            if q.audio.is_file():
                h.update(hashlib.sha256(q.audio.read_bytes()).digest())
        return h.hexdigest()[:16]


def load_questions(folder: Path) -> QuestionSet:
    if not folder.exists():
        raise FixtureError(f"{folder}: folder not found")
    if not folder.is_dir():
        raise FixtureError(f"{folder}: not a folder")
    manifest = folder / MANIFEST
    wavs = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".wav")
    if not manifest.is_file():
        raise FixtureError(f"{manifest}: no question manifest (columns: {', '.join(REQUIRED)})")
    if not wavs:
        raise FixtureError(f"{folder}: no audio files (*.wav)")
    questions = _read_manifest(manifest, folder)
    warnings = []
    listed = {q.audio.resolve() for q in questions}
    for wav in wavs:
        if wav.resolve() not in listed:
            warnings.append(f"{wav}: audio file has no manifest entry; not run")
    for q in questions:
        if not q.audio.is_file():
            warnings.append(f"{manifest}: question {q.id!r} has no audio file {q.audio.name}; recorded as bad_audio")
    return QuestionSet(folder, tuple(questions), tuple(warnings))


def _read_manifest(manifest: Path, folder: Path) -> list[Question]:
    try:
        with manifest.open(encoding="utf-8-sig", newline="") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in REQUIRED if c not in header]
            if missing:
                raise FixtureError(f"{manifest}: missing column(s) {', '.join(missing)}")
            rows = list(reader)
    except UnicodeDecodeError as exc:
        raise FixtureError(f"{manifest}: not UTF-8 text ({exc})") from None
    questions: list[Question] = []
    seen: set[str] = set()
    for line, row in enumerate(rows, start=2):
        qid = (row.get("id") or "").strip()
        if not qid:
            raise FixtureError(f"{manifest}:{line}: empty id")
        if qid in seen:
            raise FixtureError(f"{manifest}:{line}: duplicate id {qid!r}")
        seen.add(qid)
        language = (row.get("language") or "").strip()
        if not language:
            raise FixtureError(f"{manifest}:{line}: question {qid!r} has no language")
        questions.append(
            Question(
                id=qid,
                language=language,
                category=(row.get("category") or "").strip(),
                text=(row.get("text") or "").strip(),
                audio=folder / ((row.get("audio") or "").strip() or f"{qid}.wav"),
                answer=(row.get("answer") or "").strip(),
                tool=(row.get("tool") or "").strip(),
                tool_arguments=(row.get("tool_arguments") or "").strip() or "{}",
                keywords=(row.get("keywords") or "").strip(),
            )
        )
    if not questions:
        raise FixtureError(f"{manifest}: no questions")
    return questions


@dataclass(frozen=True, slots=True)
class LoadedAudio:
    frames: tuple[AudioFrame, ...]
    duration_ms: int
    note: str = ""  # what was converted, if anything


def load_audio(path: Path) -> LoadedAudio:
    """Decode a WAV file into 60 ms frames of 16 kHz mono 16-bit PCM."""
    if not path.is_file():
        raise BadAudio(f"{path}: audio file not found")
    try:
        with wave.open(str(path), "rb") as wav:
            channels, width, rate, count = wav.getnchannels(), wav.getsampwidth(), wav.getframerate(), wav.getnframes()
            raw = wav.readframes(count)
    except (wave.Error, EOFError, OSError) as exc:
        raise BadAudio(f"{path}: unreadable WAV ({exc})") from None
    if width not in (1, 2, 3, 4) or channels < 1 or rate <= 0:
        raise BadAudio(f"{path}: unsupported WAV format ({channels} channels, {8 * width}-bit, {rate} Hz)")
    if len(raw) < channels * width:
        raise BadAudio(f"{path}: no audio samples")
    samples = _to_float(raw, width).reshape(-1, channels)
    notes = []
    mono = samples.mean(axis=1)
    if channels != 1:
        notes.append(f"{channels} channels mixed to mono")
    if rate != SAMPLE_RATE:
        mono = _resample(mono, rate, SAMPLE_RATE)
        notes.append(f"resampled {rate} Hz -> {SAMPLE_RATE} Hz")
    pcm = (np.clip(mono, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    return LoadedAudio(
        frames=frames_from_pcm(pcm), duration_ms=len(pcm) * 1000 // (2 * SAMPLE_RATE), note="; ".join(notes)
    )


def frames_from_pcm(pcm: bytes) -> tuple[AudioFrame, ...]:
    """Split PCM into 60 ms frames, zero-padding the last one."""
    if len(pcm) % FRAME_BYTES:
        pcm = pcm + bytes(FRAME_BYTES - len(pcm) % FRAME_BYTES)
    return tuple(
        AudioFrame(seq=i, pcm=pcm[o : o + FRAME_BYTES], duration_ms=FRAME_MS)
        for i, o in enumerate(range(0, len(pcm), FRAME_BYTES))
    )


def _to_float(raw: bytes, width: int) -> np.ndarray:
    if width == 1:
        return (np.frombuffer(raw, dtype=np.uint8).astype(np.float64) - 128) / 128
    if width == 2:
        return np.frombuffer(raw, dtype="<i2").astype(np.float64) / 32768
    if width == 3:
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        v = np.where(v >= 1 << 23, v - (1 << 24), v)
        return v.astype(np.float64) / (1 << 23)
    return np.frombuffer(raw, dtype="<i4").astype(np.float64) / (1 << 31)


def _resample(x: np.ndarray, src: int, dst: int) -> np.ndarray:
    """Linear-interpolation resampling: enough for a VAD and a test signal, noted on the row."""
    n = max(1, round(len(x) * dst / src))
    resampled: np.ndarray = np.interp(np.arange(n) * (src / dst), np.arange(len(x)), x)
    return resampled
