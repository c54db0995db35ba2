"""The lab's ASR and TTS stages as OpenAI-compatible speech services, every request traced.

A real voice server (xiaozhi-esp32-server's ``OpenaiASR`` and ``openai`` TTS providers, or
any OpenAI audio client) is pointed at these, so the lab gets per-stage spans from a server
it did not write. Entry point: ``python -m pipeline.endpoints.speech``.
"""

from pipeline.endpoints.speech.api_errors import ApiError
from pipeline.endpoints.speech.server import DEFAULT_MAX_BODY, SPEECH, TRANSCRIPTIONS, SpeechServices
from pipeline.endpoints.speech.speech_stages import Role, SpeechStages

__all__ = ["DEFAULT_MAX_BODY", "SPEECH", "TRANSCRIPTIONS", "ApiError", "Role", "SpeechServices", "SpeechStages"]
