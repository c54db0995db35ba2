"""The failures of an OpenAI-compatible call, as exception classes whose names are the row's error class.

Also ``redact``: every message that may echo the API key passes through it before it is raised.
"""

from __future__ import annotations

from stages.llm.backend import LlmError


class CloudLlmError(LlmError):
    """A call to the cloud endpoint failed; the subclass name is the row's error class."""

    attempts: int = 1


class LlmMissingApiKey(CloudLlmError):
    """The configured API-key variable is not set."""


class LlmHttpError(CloudLlmError):
    """The endpoint answered with an HTTP error status."""

    def __init__(self, status: int, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


class RateLimited(LlmHttpError):
    """HTTP 429."""


class LlmAuthError(LlmHttpError):
    """HTTP 401 or 403: a wrong or missing key."""


class LlmTimeout(CloudLlmError):
    """Connecting, or waiting for the next byte, took longer than its limit."""


class LlmUnreachable(CloudLlmError):
    """No connection could be made (refused, no route, name not resolved)."""


class LlmConnectionError(CloudLlmError):
    """An established connection broke (reset or closed mid-stream)."""


class LlmProtocolError(CloudLlmError):
    """The response is not an OpenAI-compatible event stream (malformed SSE or JSON)."""


class LlmServerError(CloudLlmError):
    """The server reported an error inside the stream."""


def retryable(exc: CloudLlmError) -> bool:
    """Failures worth another attempt: overload, server errors and network trouble."""
    if isinstance(exc, LlmHttpError):
        return isinstance(exc, RateLimited) or exc.status >= 500
    return isinstance(exc, (LlmTimeout, LlmUnreachable, LlmConnectionError))


def redact(text: str, secret: str | None) -> str:
    """The text with the secret blanked out, and its first and last 8 characters (as providers echo them)."""
    if not secret:
        return text
    text = text.replace(secret, "***")
    if len(secret) >= 16:
        for piece in {secret[:8], secret[-8:]}:
            text = text.replace(piece, "***")
    return text
