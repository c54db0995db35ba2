"""The server's MCP client for one device: the device's tools, listed and called over its own link.

xiaozhi devices carry their own tools (volume, lights, status...) and announce
``features.mcp`` in their hello. As xiaozhi-esp32-server does (``core/handle/helloHandle.py``,
``core/providers/tools/device_mcp/mcp_handler.py``) the server then sends ``initialize``, a
second after its answer asks ``tools/list`` (paged by ``nextCursor``, every page by id 2), offers
the tools to the LLM under names an OpenAI-style function name allows (``self.light.set_light``
-> ``self_light_set_light``), and runs a tool call as ``tools/call`` over the device's link,
awaiting the answer: the round trip over the network and the device's own work become part of the
measured turn. JSON-RPC 2.0 travels inside ``{"type": "mcp", "session_id": ..., "payload": {...}}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec import UNSET

from pipeline.events import ToolFailed, ToolResult, ToolSpec
from pipeline.transport.wire import mcp
from pipeline.transport.wire.messages import Mcp

__all__ = ["DeviceToolsClient", "McpError", "McpSettings", "llm_name"]

Send = Callable[[Mcp], Awaitable[None]]

PROTOCOL_VERSION = "2024-11-05"  # what mcp_handler.py sends
INITIALIZE_ID = 1  # mcp_handler.py mcpInitializeID
TOOLS_LIST_ID = 2  # mcpToolsListID: the first page and every page after it
# The real server numbers its calls from 1, sharing ids with the two above (it looks pending calls up
# first); ids of their own keep a trace's JSON-RPC ids unambiguous. Devices echo whatever id comes.
FIRST_CALL_ID = 10_000
WHERE = "device"
_NOT_IN_A_NAME = re.compile(r"[^a-zA-Z0-9_\-\u4e00-\u9fff]")  # util.py sanitize_tool_name


class McpError(ToolFailed):
    """A device tool call that failed: the device said so, did not answer in time, or its session ended."""


@dataclass(frozen=True, slots=True)
class McpSettings:
    """How the server talks MCP to a device: the real server's waits, and the vision endpoint it announces."""

    call_timeout_s: float = 30.0  # mcp_handler.py call_mcp_tool: timeout=30
    list_delay_s: float = 1.0  # mcp_handler.py: asyncio.sleep(1) between initialize's answer and tools/list
    # initialize's vision capability: xiaozhi-sdk reads both keys and fails without them. The lab
    # serves no vision endpoint: a device that tries it is refused, it gets no picture description.
    vision_url: str = "http://127.0.0.1/mcp/vision/explain"
    vision_token: str = "lab"

    def __post_init__(self) -> None:
        if self.call_timeout_s <= 0 or self.list_delay_s < 0:
            raise ValueError("MCP call_timeout_s must be positive and list_delay_s at least 0")


def llm_name(name: str) -> str:
    """A device's tool name as the LLM is offered it: OpenAI-style function names allow no dots."""
    return _NOT_IN_A_NAME.sub("_", name)


class DeviceToolsClient:
    """The server's MCP client for one device session, and the tool executor of its turns."""

    def __init__(self, send: Send, session_id: str, settings: McpSettings | None = None) -> None:
        self._send, self.session_id = send, session_id
        self.settings = settings or McpSettings()
        self._listing: dict[str, ToolSpec] = {}  # by the LLM's name, as the pages come
        self._originals: dict[str, str] = {}  # the LLM's name -> the device's
        self._tools: tuple[ToolSpec, ...] = ()  # once the last page has come
        self._cursors: set[str] = set()
        self._pending: dict[int, asyncio.Future[mcp.Result | mcp.Error]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._next_call = FIRST_CALL_ID
        self.ready = asyncio.Event()  # the device's tool list is complete (or it will never be)
        self.problems: list[str] = []  # what the device answered that could not be used, for whoever asks
        self.closed = False

    # --- the session's side --------------------------------------------------

    async def start(self) -> None:
        """After a hello with ``features.mcp``: ``initialize``; its answer brings ``tools/list``."""
        vision = mcp.Vision(url=self.settings.vision_url, token=self.settings.vision_token)
        params = mcp.InitializeParams(
            protocolVersion=PROTOCOL_VERSION,
            capabilities=mcp.ClientCapabilities(roots=mcp.Roots(listChanged=True), sampling={}, vision=vision),
            clientInfo=mcp.PeerInfo(name="xiaozhi-lab", version="1.0.0"),  # the real server: XiaozhiClient
        )
        await self._rpc(mcp.Request(id=INITIALIZE_ID, method=mcp.INITIALIZE, params=params))

    def handle(self, message: Mcp) -> None:
        """One ``mcp`` message from the device: an answer to what we asked, or something we ignore."""
        answer = message.payload
        if not isinstance(answer, mcp.Result | mcp.Error) or not isinstance(answer.id, int):
            return  # a request or notification from the device, or no JSON-RPC: the real server logs it
        rid = answer.id
        if rid in self._pending:
            future = self._pending.pop(rid)
            if not future.done():
                future.set_result(answer)
        elif rid == INITIALIZE_ID:
            if isinstance(answer, mcp.Result):
                self._spawn(self._list_later())
            else:
                self._give_up(f"initialize failed: {answer.error.message}")
        elif rid == TOOLS_LIST_ID:
            self._listed(answer)

    def tools(self) -> tuple[ToolSpec, ...]:
        """The device's tools as the LLM is offered them; none until the whole list has come."""
        return () if self.closed else self._tools

    def executor(self) -> DeviceToolsClient:
        """The executor of the device's tools: this client, which calls them over the device's link."""
        return self

    def close(self) -> None:
        """The session ended: calls still waiting fail at once, and nothing more is asked."""
        self.closed = True
        for rid, future in self._pending.items():
            if not future.done():
                future.set_exception(McpError("the device's session ended during the call", WHERE, str(rid)))
        self._pending.clear()
        for task in self._tasks:
            task.cancel()

    # --- the executor's side -------------------------------------------------

    async def execute(self, name: str, arguments: str) -> str:
        return (await self.run(name, arguments)).result

    async def run(self, name: str, arguments: str) -> ToolResult:
        """``tools/call`` over the device's link; its answer's text, or ``McpError``."""
        device_name = self._originals.get(name, name)
        if self.closed:
            raise McpError(f"device tool {device_name!r}: the device's session has ended", WHERE)
        if device_name not in self._originals.values():
            offered = ", ".join(sorted(self._originals.values())) or "none"
            raise McpError(f"the device offers no tool {name!r} (it offers: {offered})", WHERE)
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            args = None
        if not isinstance(args, dict):
            raise McpError(f"device tool {device_name!r}: arguments are not a JSON object: {arguments!r}", WHERE)
        rid, self._next_call = self._next_call, self._next_call + 1
        answer = await self._call(rid, device_name, args)
        return ToolResult(device_name, _result_text(device_name, rid, answer), where=WHERE, call_id=str(rid))

    async def _call(self, rid: int, name: str, args: dict[str, Any]) -> mcp.Result | mcp.Error:
        future: asyncio.Future[mcp.Result | mcp.Error] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        call = mcp.Request(id=rid, method=mcp.TOOLS_CALL, params=mcp.CallParams(name=name, arguments=args))
        timeout = self.settings.call_timeout_s
        try:
            try:
                await self._rpc(call)
            except Exception as exc:  # the link is gone: the call fails as the device's would
                raise McpError(f"could not be sent: {exc}") from exc
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            raise McpError(
                f"device tool {name!r} (id {rid}): no answer within {timeout:g} s", WHERE, str(rid)
            ) from None
        except McpError as exc:
            raise McpError(f"device tool {name!r} (id {rid}): {exc}", WHERE, str(rid)) from None
        finally:
            self._pending.pop(rid, None)

    # --- listing -------------------------------------------------------------

    async def _list_later(self) -> None:
        await asyncio.sleep(self.settings.list_delay_s)
        await self._list()

    async def _list(self, cursor: str = "") -> None:
        params = mcp.ListParams(cursor=cursor) if cursor else UNSET
        await self._rpc(mcp.Request(id=TOOLS_LIST_ID, method=mcp.TOOLS_LIST, params=params))

    def _listed(self, answer: mcp.Result | mcp.Error) -> None:
        page = mcp.list_result(answer) if isinstance(answer, mcp.Result) else None
        if not isinstance(page, mcp.ListResult):
            self._give_up(f"tools/list failed: {_error_text(answer)}")
            return
        for tool in page.tools:
            if tool.name:
                self._add(tool)
        cursor = page.nextCursor
        if isinstance(cursor, str) and cursor not in self._cursors:
            self._cursors.add(cursor)
            self._spawn(self._list(cursor))
            return
        if cursor:
            self.problems.append(f"tools/list repeated the cursor {cursor!r}; the list ends there")
        self._tools = tuple(self._renamed(spec) for spec in self._listing.values())
        self.ready.set()

    def _add(self, tool: mcp.ListedTool) -> None:
        """One listed tool, its schema cut to what the real server keeps (type, properties, required)."""
        schema = tool.inputSchema
        required = schema.required if isinstance(schema.required, list) else []
        parameters = mcp.InputSchema(type=schema.type, properties=schema.properties, required=required)
        name = llm_name(tool.name)
        self._originals[name] = tool.name
        self._listing[name] = ToolSpec(name, tool.description, _json(parameters))

    def _renamed(self, spec: ToolSpec) -> ToolSpec:
        """A description that names other tools names them as the LLM is offered them (as the real server)."""
        description = spec.description
        for name, original in self._originals.items():
            description = description.replace(original, name)
        return ToolSpec(spec.name, description, spec.parameters_json)

    def _give_up(self, problem: str) -> None:
        """The device's tools will not be known: its turns get the server's own (the real server's too)."""
        self.problems.append(problem)
        self.ready.set()

    # --- the link --------------------------------------------------------------

    async def _rpc(self, payload: mcp.Request) -> None:
        await self._send(Mcp(payload=payload, session_id=self.session_id))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        with contextlib.suppress(asyncio.CancelledError):
            if task.exception() is not None:  # the link went away while listing
                self._give_up(f"the tool list could not be asked for: {task.exception()}")


def _json(value: object) -> str:
    """JSON as ``json.dumps(..., ensure_ascii=False)`` writes it (what the LLM is shown)."""
    return json.dumps(msgspec.to_builtins(value), ensure_ascii=False)


def _error_text(answer: mcp.Result | mcp.Error) -> str:
    if isinstance(answer, mcp.Error):
        return answer.error.message
    return f"an answer without a usable result: {_json(answer.result)[:200]}"


def _result_text(name: str, rid: int, answer: mcp.Result | mcp.Error) -> str:
    """The text of a ``tools/call`` answer as mcp_handler.py takes it; an error answer is ``McpError``."""
    if isinstance(answer, mcp.Error):
        raise McpError(f"device tool {name!r} (id {rid}) failed: {answer.error.message}", WHERE, str(rid))
    result = mcp.call_result(answer)
    if isinstance(result, mcp.NotJsonRpc):  # as the real server, whatever else came is passed on whole
        return _json(answer.result)
    texts = [c.text for c in result.content if isinstance(c.text, str)]
    if result.isError:
        why = " ".join(texts) or "isError without a text"
        raise McpError(f"device tool {name!r} (id {rid}) failed: {why}", WHERE, str(rid))
    if texts:
        return texts[0]
    return _json(answer.result)
