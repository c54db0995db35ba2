"""Reads a fixtures folder: the question manifest and the audio of each question.

``manifest.csv`` columns: ``id, language, category, text`` (required) and
``audio`` (default ``<id>.wav``), ``answer``, ``tool``, ``tool_arguments``
(used by the scripted LLM) and ``keywords`` (what a good answer contains).
Audio is read by ``pipeline.settings.audio``.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

MANIFEST = "manifest.csv"
REQUIRED = ("id", "language", "category", "text")
OPTIONAL = ("audio", "answer", "tool", "tool_arguments", "keywords")


class FixtureError(ValueError):
    """The folder cannot be used at all (missing, no manifest, no audio)."""


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
