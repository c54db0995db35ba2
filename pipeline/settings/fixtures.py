"""Reads a fixtures folder: the questions and the audio of each.

``manifest.csv`` columns: ``id, language, category, text`` (required) and
``audio`` (default ``<id>.wav``), ``answer``, ``tool``, ``tool_arguments``
(used by the scripted LLM) and ``keywords`` (what a good answer contains).
``manifest.jsonl`` holds the same fields, one JSON object per line (``id`` and
``audio`` or an ``<id>.wav`` beside it are enough; a missing language is the
default one). A folder without a manifest is a question per audio file, its
file stem the id, no reference text (so no error rate: never invented) and the
default language, which may be ``AUTO``: the ASR detects it and records it.
Audio files are found by extension and read by ``pipeline.settings.audio``. A ``truth.csv`` beside the
manifest (``pipeline.records.truth``) gives a question where its user really started and finished speaking
and where they paused; a question it has no line for has no truth (``None``), a bad one refuses the folder.
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import soundfile

from pipeline.records.truth import TRUTH, Truth, TruthError, read_truth
from pipeline.settings.audio import audio_extensions

MANIFEST = "manifest.csv"
MANIFEST_JSONL = "manifest.jsonl"
REQUIRED = ("id", "language", "category", "text")
AUTO = ""  # no language given: the ASR detects it
OPTIONAL = ("audio", "answer", "tool", "tool_arguments", "keywords")


class FixtureError(ValueError):
    """The folder cannot be used at all (missing, no manifest, no audio)."""


@dataclass(frozen=True, slots=True)
class Question:
    """One question of a fixtures folder: what is said, its audio, the scripted LLM's answer or tool call, and
    what a good answer contains."""

    id: str
    language: str
    category: str
    text: str
    audio: Path
    answer: str = ""
    tool: str = ""
    tool_arguments: str = "{}"
    keywords: str = ""  # expected in a good answer: ";"-separated groups of "|"-separated alternatives
    truth: Truth | None = None  # from the folder's truth.csv: where the user really finished, and paused


@dataclass(frozen=True, slots=True)
class QuestionSet:
    """A fixtures folder's questions in the order a run asks them, with what was wrong in the folder but did not
    stop it (``warnings``, shown to the user)."""

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


def load_questions(folder: Path, language: str = AUTO) -> QuestionSet:
    """The folder's questions; ``language`` is the default for questions that do not name one."""
    if not folder.exists():
        raise FixtureError(f"{folder}: folder not found")
    if not folder.is_dir():
        raise FixtureError(f"{folder}: not a folder")
    extensions = audio_extensions()
    audio = sorted(p for p in folder.iterdir() if p.suffix.lower() in extensions and p.is_file())
    if not audio:
        raise FixtureError(f"{folder}: no audio files ({', '.join(sorted(extensions))})")
    manifest = folder / MANIFEST
    jsonl = folder / MANIFEST_JSONL
    warnings = []
    if manifest.is_file():
        questions = _read_manifest(manifest, folder)
    elif jsonl.is_file():
        manifest = jsonl
        questions = _read_jsonl(jsonl, folder, language)
    else:
        questions = [Question(p.stem, language, "", "", p) for p in audio]
        said = language or "detected by the ASR"
        warnings.append(f"{folder}: no manifest: one question per audio file, language {said}, no reference text")
        return QuestionSet(folder, _with_truth(_unique(questions, folder), folder, warnings), tuple(warnings))
    listed = {q.audio.resolve() for q in questions}
    for path in audio:
        if path.resolve() not in listed:
            warnings.append(f"{path}: audio file has no manifest entry; not run")
    for q in questions:
        if not q.audio.is_file():
            warnings.append(f"{manifest}: question {q.id!r} has no audio file {q.audio.name}; recorded as bad_audio")
    return QuestionSet(folder, _with_truth(tuple(questions), folder, warnings), tuple(warnings))


def _with_truth(questions: tuple[Question, ...], folder: Path, warnings: list[str]) -> tuple[Question, ...]:
    """Each question with its line of the folder's truth.csv, if the folder has one; a truth naming no
    question's audio is said (a misspelt name would otherwise leave its question without a truth)."""
    path = folder / TRUTH
    if not path.is_file():
        return questions
    names = {q.id: _audio_name(q.audio, folder) for q in questions}
    durations = {names[q.id]: ms for q in questions if (ms := _duration_ms(q.audio)) is not None}
    try:
        truths = read_truth(path, durations)
    except TruthError as exc:
        raise FixtureError(str(exc)) from None
    for audio in sorted(set(truths) - set(names.values())):
        warnings.append(f"{path}: {audio!r} is no question's audio; its truth is not used")
    return tuple(replace(q, truth=truths.get(names[q.id])) for q in questions)


def _audio_name(audio: Path, folder: Path) -> str:
    """The name truth.csv gives a clip: its path relative to the folder, as the manifest writes it."""
    try:
        return audio.relative_to(folder).as_posix()
    except ValueError:
        return audio.as_posix()


def _duration_ms(audio: Path) -> float | None:
    """The clip's length from its header, or None where it cannot be read (its turn says why: bad_audio)."""
    try:
        info = soundfile.info(str(audio))
    except (OSError, RuntimeError):  # libsndfile's errors are RuntimeErrors
        return None
    return float(info.frames * 1000 / info.samplerate) if info.samplerate else None


def _unique(questions: list[Question], folder: Path) -> tuple[Question, ...]:
    seen: dict[str, Path] = {}
    for q in questions:
        if q.id in seen:
            raise FixtureError(f"{folder}: {seen[q.id].name} and {q.audio.name} would both be question {q.id!r}")
        seen[q.id] = q.audio
    return tuple(questions)


def _read_jsonl(manifest: Path, folder: Path, language: str) -> list[Question]:
    questions: list[Question] = []
    try:
        lines = manifest.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        raise FixtureError(f"{manifest}: not UTF-8 text ({exc})") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise FixtureError(f"{manifest}:{number}: not a JSON object ({exc})") from None
        if not isinstance(row, dict):
            raise FixtureError(f"{manifest}:{number}: not a JSON object")
        questions.append(_question({k: str(v) for k, v in row.items()}, folder, f"{manifest}:{number}", language))
    if not questions:
        raise FixtureError(f"{manifest}: no questions")
    return list(_unique(questions, folder))


def _question(row: dict[str, str], folder: Path, where: str, language: str) -> Question:
    qid = (row.get("id") or "").strip()
    if not qid:
        raise FixtureError(f"{where}: empty id")
    return Question(
        id=qid,
        language=(row.get("language") or "").strip() or language,
        category=(row.get("category") or "").strip(),
        text=(row.get("text") or "").strip(),
        audio=folder / ((row.get("audio") or "").strip() or f"{qid}.wav"),
        answer=(row.get("answer") or "").strip(),
        tool=(row.get("tool") or "").strip(),
        tool_arguments=(row.get("tool_arguments") or "").strip() or "{}",
        keywords=(row.get("keywords") or "").strip(),
    )


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
        questions.append(_question(row, folder, f"{manifest}:{line}", language))
    if not questions:
        raise FixtureError(f"{manifest}: no questions")
    return questions
