"""The two requests' fields, read and checked as OpenAI's audio API defines them.

A field the configured stages cannot honour (a transcription ``prompt``, a ``temperature``
other than 0, a ``speed`` other than 1, TTS ``instructions``) is refused with a 400 that says
so, never accepted and ignored: a client must not believe it changed the speech.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from pipeline.endpoints.speech.api_errors import ApiError, bad_field, missing
from pipeline.endpoints.speech.bodies import OUTPUT_FORMATS

TRANSCRIPTION_FORMATS = ("json", "text", "verbose_json")
SPEECH_FORMATS = tuple(OUTPUT_FORMATS)
MAX_INPUT_CHARS = 4096  # OpenAI's limit on ``input``


@dataclass(frozen=True, slots=True)
class TranscriptionRequest:
    """A checked ``POST /v1/audio/transcriptions``: the uploaded file and the fields the configured ASR honours."""

    audio: bytes
    model: str
    language: str  # "" = detect
    response_format: str


@dataclass(frozen=True, slots=True)
class SpeechRequest:
    """A checked ``POST /v1/audio/speech``: the text to speak and the fields the configured TTS honours."""

    model: str
    text: str
    voice: str
    response_format: str


def _text(fields: Mapping[str, Any], name: str, default: str = "") -> str:
    value = fields.get(name, default)
    if not isinstance(value, str):
        raise bad_field(name, f"'{name}' must be a string")
    return value


def _format(value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ApiError(
            400,
            "unsupported_response_format",
            f"response_format {value!r} is not supported here; supported: {', '.join(allowed)}",
            "response_format",
        )
    return value


def _number(fields: Mapping[str, Any], name: str, default: float) -> float:
    raw = fields.get(name, default)
    if isinstance(raw, bool):
        raise bad_field(name, f"'{name}' must be a number")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise bad_field(name, f"'{name}' must be a number, not {raw!r}") from None
    if not math.isfinite(value):
        raise bad_field(name, f"'{name}' must be a finite number")
    return value


def transcription(fields: Mapping[str, Any]) -> TranscriptionRequest:
    """A ``POST /v1/audio/transcriptions`` form (multipart: ``file``, ``model``, optional fields)."""
    upload = fields.get("file")
    if upload is None:
        raise missing("file", "the audio file to transcribe")
    if not isinstance(upload, web.FileField):
        raise bad_field("file", "'file' must be a file upload (multipart/form-data with a filename)")
    model = _text(fields, "model").strip()
    if not model:
        raise missing("model", "the model to use, e.g. one listed by GET /v1/models")
    language = _text(fields, "language").strip().lower()
    if _text(fields, "prompt").strip():
        raise bad_field("prompt", "the configured ASR takes no prompt: send none", "unsupported_parameter")
    temperature = _number(fields, "temperature", 0.0)
    if temperature != 0.0:
        raise bad_field(
            "temperature", "the configured ASR decodes at temperature 0 only: send 0 or none", "unsupported_parameter"
        )
    response_format = _format(_text(fields, "response_format", "json").strip() or "json", TRANSCRIPTION_FORMATS)
    return TranscriptionRequest(upload.file.read(), model, language, response_format)


def json_body(raw: bytes) -> object:
    """A request's JSON body; ``ApiError`` 400 when it is none (nesting deeper than the decoder follows included)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ApiError(400, "invalid_json", f"the body is not valid JSON ({str(exc)[:120]})") from None


def speech(body: object) -> SpeechRequest:
    """A ``POST /v1/audio/speech`` JSON body: ``model``, ``input``; optional ``voice``, ``response_format``..."""
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "the body must be a JSON object")
    model = _text(body, "model").strip()
    if not model:
        raise missing("model", "the model to use, e.g. one listed by GET /v1/models")
    if "input" not in body:
        raise missing("input", "the text to speak")
    text = _text(body, "input")
    if not text.strip():
        raise ApiError(400, "empty_input", "'input' is empty: give the text to speak", "input")
    if len(text) > MAX_INPUT_CHARS:
        raise ApiError(400, "string_above_max_length", f"'input' is longer than {MAX_INPUT_CHARS} characters", "input")
    speed = _number(body, "speed", 1.0)
    if not 0.25 <= speed <= 4.0:
        raise bad_field("speed", f"'speed' must be between 0.25 and 4.0, not {speed}")
    if speed != 1.0:
        raise bad_field("speed", "the configured TTS speaks at its own rate: speed 1.0 only", "unsupported_parameter")
    if _text(body, "instructions").strip():
        raise bad_field("instructions", "the configured TTS takes no instructions: send none", "unsupported_parameter")
    if _text(body, "stream_format", "audio") != "audio":
        raise bad_field("stream_format", "only stream_format 'audio' is served", "unsupported_parameter")
    response_format = _format(_text(body, "response_format", "mp3").strip() or "mp3", SPEECH_FORMATS)
    return SpeechRequest(model, text, _text(body, "voice"), response_format)
