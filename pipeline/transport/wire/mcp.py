"""The MCP payloads of ``mcp`` messages, typed: JSON-RPC 2.0 and the methods the lab's two ends use.

The server asks ``initialize``, ``tools/list`` (paged by ``cursor`` / ``nextCursor``) and
``tools/call``; the device answers each with a result or an error (firmware ``main/mcp_server.cc``,
xiaozhi-esp32-server ``mcp_handler.py``). JSON-RPC has no tag field, so ``read`` tells a payload by
its keys: a ``method`` makes a request (with an ``id``) or a notification, an ``id`` with ``result``
or ``error`` a response; anything else is ``NotJsonRpc``, which the ends ignore as the real parts do.
A request's ``params`` are typed by its method when it arrives; a response does not say which method
it answers, so its ``result`` stays JSON until the end that asked reads it with ``initialize_result``,
``list_result`` or ``call_result``, each of which returns the typed result or a refusal
(``NotJsonRpc``), never an exception.

Fields a peer may leave out are ``UNSET`` and left out when encoded, so what the lab sends keeps
its keys: ``isError: false`` and an empty ``url`` are sent, an absent ``nextCursor`` is not.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

JSONRPC: Final = "2.0"
INITIALIZE: Final = "initialize"
TOOLS_LIST: Final = "tools/list"
TOOLS_CALL: Final = "tools/call"

RequestId = int | float | str
T = TypeVar("T")


# --- the methods' params and results ------------------------------------------------------------------


class PeerInfo(msgspec.Struct, frozen=True, kw_only=True):
    """``clientInfo`` / ``serverInfo``: who speaks."""

    name: str
    version: str


class Roots(msgspec.Struct, frozen=True, kw_only=True):
    """The client can tell the device its roots changed (``roots.listChanged``), as the real server says."""

    listChanged: bool = False


class Vision(msgspec.Struct, frozen=True, kw_only=True):
    """The vision endpoint xiaozhi-esp32-server announces in ``initialize`` (xiaozhi-sdk needs both keys)."""

    url: str
    token: str


class ClientCapabilities(msgspec.Struct, frozen=True, kw_only=True):
    """What the server says it can do in ``initialize``: roots, sampling, and xiaozhi's vision endpoint."""

    roots: Roots | UnsetType = UNSET
    sampling: dict[str, Any] | UnsetType = UNSET
    vision: Vision | UnsetType = UNSET


class InitializeParams(msgspec.Struct, frozen=True, kw_only=True):
    """``initialize`` params: the MCP protocol version asked, the server's capabilities and who it is."""

    protocolVersion: str
    capabilities: ClientCapabilities = ClientCapabilities()
    clientInfo: PeerInfo | UnsetType = UNSET


class InitializeResult(msgspec.Struct, frozen=True, kw_only=True):
    """The device's answer to ``initialize``: the version it speaks, its capabilities and who it is."""

    protocolVersion: str
    capabilities: dict[str, Any]
    serverInfo: PeerInfo | UnsetType = UNSET


class ListParams(msgspec.Struct, frozen=True, kw_only=True):
    """``tools/list`` params: the page after ``cursor`` (the first page is asked without params)."""

    cursor: str | UnsetType = UNSET


class PropertySchema(msgspec.Struct, frozen=True, kw_only=True):
    """One argument's JSON Schema as the firmware lists it (mcp_server.h Property)."""

    type: str
    default: bool | int | str | UnsetType = UNSET
    minimum: int | UnsetType = UNSET
    maximum: int | UnsetType = UNSET


class InputSchema(msgspec.Struct, frozen=True, kw_only=True):
    """A tool's ``inputSchema``: the part the real server keeps (type, properties, required)."""

    type: str = "object"
    properties: dict[str, Any] = {}
    required: list[str] | UnsetType = UNSET


class ListedTool(msgspec.Struct, frozen=True, kw_only=True):
    """One tool a device lists: its name, what it does, and the arguments it takes."""

    name: str
    description: str = ""
    inputSchema: InputSchema = InputSchema()


class ListResult(msgspec.Struct, frozen=True, kw_only=True):
    """A ``tools/list`` page; ``nextCursor`` names the next page's first tool, absent on the last."""

    tools: list[ListedTool]
    nextCursor: str | UnsetType = UNSET


class CallParams(msgspec.Struct, frozen=True, kw_only=True):
    """``tools/call`` params: which tool, with which arguments (``null`` when it takes none)."""

    name: str
    arguments: dict[str, Any] | None = None


class Content(msgspec.Struct, frozen=True, kw_only=True):
    """One item of a tool call's answer: the firmware answers with ``text``."""

    type: str = "text"
    text: str | UnsetType = UNSET


class CallResult(msgspec.Struct, frozen=True, kw_only=True):
    """A ``tools/call`` answer: its content items, and ``isError`` when the tool failed."""

    content: list[Content] = []
    isError: bool = False


class ErrorObject(msgspec.Struct, frozen=True, kw_only=True):
    """A JSON-RPC error; the firmware sends only ``message``."""

    message: str = ""
    code: int | UnsetType = UNSET
    data: Any = UNSET


class BadParams(msgspec.Struct, frozen=True, kw_only=True):
    """A request of a known method whose params do not read: ``field`` names the first that did not."""

    field: str
    reason: str


# --- JSON-RPC 2.0 --------------------------------------------------------------------------------------

Params = InitializeParams | ListParams | CallParams | BadParams | dict[str, Any]


class Request(msgspec.Struct, frozen=True, kw_only=True):
    """A call that wants an answer. ``params`` typed by ``method`` (``BadParams`` when they do not read,
    a plain object for a method the lab does not know)."""

    jsonrpc: str = JSONRPC
    id: RequestId
    method: str
    params: Params | UnsetType = UNSET


class Notification(msgspec.Struct, frozen=True, kw_only=True):
    """A call that wants no answer (no ``id``)."""

    jsonrpc: str = JSONRPC
    method: str
    params: dict[str, Any] | UnsetType = UNSET


class Result(msgspec.Struct, frozen=True, kw_only=True):
    """A success answer; ``result`` is a typed result where the lab sends it, JSON where it arrives."""

    jsonrpc: str = JSONRPC
    id: RequestId | None
    result: Any


class Error(msgspec.Struct, frozen=True, kw_only=True):
    """A failure answer."""

    jsonrpc: str = JSONRPC
    id: RequestId | None
    error: ErrorObject


class NotJsonRpc(msgspec.Struct, frozen=True, kw_only=True):
    """A payload that is no JSON-RPC 2.0 message the lab reads; ``reason`` says why (the ends ignore it)."""

    reason: str


JsonRpc = Request | Notification | Result | Error
Payload = JsonRpc | NotJsonRpc


class _Keys(msgspec.Struct, frozen=True):
    """Which keys a payload holds, each value left as JSON to read by its struct."""

    jsonrpc: Any = UNSET
    id: Any = UNSET
    method: Any = UNSET
    params: Any = UNSET
    result: Any = UNSET
    error: Any = UNSET


_KEYS: Final = msgspec.json.Decoder(_Keys)
_PARAMS: Final[dict[str, type[InitializeParams | ListParams | CallParams]]] = {
    INITIALIZE: InitializeParams,
    TOOLS_LIST: ListParams,
    TOOLS_CALL: CallParams,
}


def read(raw: bytes | str) -> Payload:
    """The JSON-RPC message a payload holds, told by its keys; ``NotJsonRpc`` for anything else."""
    if not raw:
        return NotJsonRpc(reason="no payload")
    try:
        keys = _KEYS.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        return NotJsonRpc(reason=f"not a JSON object: {_short(exc)}")
    return of_keys(keys)


def of_keys(keys: _Keys) -> Payload:
    try:
        if keys.method is not UNSET:
            if keys.id is UNSET:
                return msgspec.convert(_present(keys, "jsonrpc", "method", "params"), Notification)
            request = msgspec.convert(_present(keys, "jsonrpc", "id", "method", "params"), _RawRequest)
            return _typed(request)
        if keys.id is not UNSET and keys.result is not UNSET:
            return msgspec.convert(_present(keys, "jsonrpc", "id", "result"), Result)
        if keys.id is not UNSET and keys.error is not UNSET:
            return msgspec.convert(_present(keys, "jsonrpc", "id", "error"), Error)
    except (msgspec.ValidationError, RecursionError) as exc:
        return NotJsonRpc(reason=f"a JSON-RPC message that does not read: {_short(exc)}")
    return NotJsonRpc(reason="neither a method nor an id with a result or an error")


class _RawRequest(msgspec.Struct, frozen=True, kw_only=True):
    jsonrpc: str = JSONRPC
    id: RequestId
    method: str
    params: dict[str, Any] | UnsetType | None = UNSET


def _present(keys: _Keys, *names: str) -> dict[str, Any]:
    return {name: getattr(keys, name) for name in names if getattr(keys, name) is not UNSET}


def _typed(request: _RawRequest) -> Request:
    kind = _PARAMS.get(request.method)
    params: Params | UnsetType = UNSET if request.params is None else request.params
    if kind is not None and params is not UNSET:
        try:
            params = msgspec.convert(params, kind)
        except (msgspec.ValidationError, RecursionError) as exc:
            params = BadParams(field=_field(str(exc)), reason=_short(exc))
    return Request(jsonrpc=request.jsonrpc, id=request.id, method=request.method, params=params)


def _field(error: str) -> str:
    """The field a ValidationError names (``... at `$.name` `` or ``missing required field `name` ``)."""
    if "`$." in error:
        return error.split("`$.", 1)[1].split("`", 1)[0].split(".", 1)[0].split("[", 1)[0]
    if "field `" in error:
        return error.split("field `", 1)[1].split("`", 1)[0]
    return ""


# --- reading an answer as the method asked ------------------------------------------------------------


def initialize_result(answer: Result) -> InitializeResult | NotJsonRpc:
    return _result(answer, InitializeResult)


def list_result(answer: Result) -> ListResult | NotJsonRpc:
    """A ``tools/list`` page; a listed tool that does not read is left out, as the real server skips it."""
    page = _result(answer, _RawPage)
    if isinstance(page, NotJsonRpc):
        return page
    tools = []
    for item in page.tools:
        try:
            tools.append(msgspec.convert(item, ListedTool))
        except (msgspec.ValidationError, RecursionError):
            continue
    cursor = page.nextCursor if isinstance(page.nextCursor, str) and page.nextCursor else UNSET
    return ListResult(tools=tools, nextCursor=cursor)


class _RawPage(msgspec.Struct, frozen=True, kw_only=True):
    tools: list[Any]
    nextCursor: Any = UNSET  # a cursor that is no string ends the list


def call_result(answer: Result) -> CallResult | NotJsonRpc:
    return _result(answer, CallResult)


def _result(answer: Result, kind: type[T]) -> T | NotJsonRpc:
    try:
        return msgspec.convert(answer.result, kind)
    except (msgspec.ValidationError, RecursionError) as exc:
        return NotJsonRpc(reason=f"a result that does not read: {_short(exc)}")


def _short(exc: BaseException) -> str:
    return str(exc)[:200] or type(exc).__name__
