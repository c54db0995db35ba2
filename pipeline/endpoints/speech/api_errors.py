"""Refusals and failures as OpenAI's API words them: ``{"error": {message, type, param, code}}``.

``code`` is also the failed span's ``error.type``, so a trace and the client name the same cause.
"""

from __future__ import annotations

from aiohttp import web

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"


class ApiError(Exception):
    """A request that is refused (4xx) or could not be served (5xx)."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.param = status, code, message, param

    @property
    def kind(self) -> str:
        return SERVER_ERROR if self.status >= 500 else INVALID_REQUEST

    def response(self) -> web.Response:
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return web.json_response(body, status=self.status, headers=headers)


def bad_field(param: str, message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, code, message, param)


def missing(param: str, what: str) -> ApiError:
    return ApiError(400, "missing_required_parameter", f"you must provide '{param}' ({what})", param)
