"""The server's MCP client for one device: the device's tools, listed and called over its own link.

xiaozhi devices carry their own tools (volume, lights, status...) and announce
``features.mcp`` in their hello. As xiaozhi-esp32-server does (``core/handle/helloHandle.py``,
``core/providers/tools/device_mcp/mcp_handler.py``) the server then sends ``initialize``, a
second after its answer asks ``tools/list`` (paged by ``nextCursor``, every page by id 2), offers
the tools to the LLM under names an OpenAI-style function name allows (``self.light.set_light``
-> ``self_light_set_light``), and runs a tool call as ``tools/call`` over the device's link,
awaiting the answer: the round trip over the network and the device's own work become part of the
measured turn. JSON-RPC 2.0 travels inside ``{"type": "mcp", "session_id": ..., "payload": {...}}``.

What a device lists is bounded where the real server takes anything: at most ``MOST_TOOLS`` tools kept,
``MOST_PAGES`` pages followed, each tool at most ``MOST_TOOL_CHARS`` and its name at most ``MOST_NAME_CHARS``
long, a call's answer at most ``MOST_RESULT_CHARS``; a device's text quoted in a problem or an error is cut to
``MOST_QUOTED_CHARS``. The real server renames the names a description mentions tool by tool over every tool
(quadratic: 15,000 tools in one 223 KiB page held the event loop, and every other device's ping, for 5 s);
here each description is rewritten in one pass of a regex shaped as a trie of the names, whatever their number.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections import Counter
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
# OpenAI-style chat requests take at most 128 tools and refuse more; the firmware offers a dozen or two
MOST_TOOLS = 128
# the firmware fills a page to 8,000 bytes (mcp_server.cc GetToolsList), about 15 of its tools: 32 pages carry
# twice what 128 such tools need, and bound the round trips and cursors a device can ask of the server
MOST_PAGES = 32
# a firmware tool fits one 8,000-byte page with the page's own JSON; a function name is 64 characters at most
# in OpenAI-style requests, which refuse the whole request for a longer one; the cursor is a tool's name
MOST_TOOL_CHARS = 8000
MOST_NAME_CHARS = 64
MOST_QUOTED_CHARS = 200
MOST_RESULT_CHARS = 16_000  # a tool's answer kept: a device's status is a few hundred; a page would cost the prompt
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
        self._cursors: set[str] = set()  # at most MOST_PAGES, each at most MOST_NAME_CHARS long
        self._pages = 0
        self._left_out: Counter[str] = Counter()  # tools not kept, by why
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
                self._give_up(f"initialize failed: {_quoted(answer.error.message)}")
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
        self._pages += 1
        kept, cut = _first_tools(answer, MOST_TOOLS - len(self._listing))
        page = mcp.list_result(kept) if isinstance(kept, mcp.Result) else None
        if not isinstance(page, mcp.ListResult):
            self._give_up(f"tools/list failed: {_error_text(answer)}")
            return
        for tool in page.tools:
            self._add(tool)
        self._left_out[f"past the {MOST_TOOLS} an LLM request takes"] += cut
        cursor = page.nextCursor
        if isinstance(cursor, str) and self._next_page(cursor):
            self._cursors.add(cursor)
            self._spawn(self._list(cursor))
            return
        rename = _renamer(self._originals)
        self._tools = tuple(ToolSpec(t.name, rename(t.description), t.parameters_json) for t in self._listing.values())
        self.problems.extend(f"{count} tools left out: {why}" for why, count in self._left_out.items() if count)
        self.ready.set()

    def _next_page(self, cursor: str) -> bool:
        """Whether to ask for the page ``cursor`` names; the problem said when the list ends short of it."""
        if cursor in self._cursors:
            problem = f"tools/list repeated the cursor {_quoted(cursor)}"
        elif len(cursor) > MOST_NAME_CHARS:
            problem = f"tools/list gave a cursor of {len(cursor)} characters, no tool's name"
        elif self._pages >= MOST_PAGES:
            problem = f"tools/list has more than {MOST_PAGES} pages"
        elif len(self._listing) >= MOST_TOOLS:
            problem = f"tools/list has more than {MOST_TOOLS} tools"
        else:
            return True
        self.problems.append(f"{problem}; the list ends there")
        return False

    def _add(self, tool: mcp.ListedTool) -> None:
        """One listed tool, its schema cut to what the real server keeps (type, properties, required)."""
        if not tool.name:
            return
        if len(tool.name) > MOST_NAME_CHARS:
            self._left_out[f"a name longer than {MOST_NAME_CHARS} characters"] += 1
            return
        schema = tool.inputSchema
        required = schema.required if isinstance(schema.required, list) else []
        parameters = _json(mcp.InputSchema(type=schema.type, properties=schema.properties, required=required))
        if len(tool.name) + len(tool.description) + len(parameters) > MOST_TOOL_CHARS:
            self._left_out[f"larger than {MOST_TOOL_CHARS} characters"] += 1
            return
        name = llm_name(tool.name)
        self._originals[name] = tool.name
        self._listing[name] = ToolSpec(name, tool.description, parameters)

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


def _quoted(text: str, most: int = MOST_QUOTED_CHARS) -> str:
    """A device's text cut to ``most`` characters, the cut said: ``MOST_QUOTED_CHARS`` in a problem or an error,
    ``MOST_RESULT_CHARS`` for a tool's result as the turn keeps it (the LLM's next prompt, the span)."""
    if len(text) <= most:
        return text
    return f"{text[:most]}... ({len(text) - most} more characters)"


def _error_text(answer: mcp.Result | mcp.Error) -> str:
    if isinstance(answer, mcp.Error):
        return _quoted(answer.error.message)
    return f"an answer without a usable result: {_json(answer.result)[:MOST_QUOTED_CHARS]}"


def _first_tools(answer: mcp.Result | mcp.Error, room: int) -> tuple[mcp.Result | mcp.Error, int]:
    """A page cut to its first ``room`` tools before any is read, and how many were cut: a device's page of
    thousands costs no more than ``room`` of them."""
    if not isinstance(answer, mcp.Result) or not isinstance(answer.result, dict):
        return answer, 0
    tools = answer.result.get("tools")
    if not isinstance(tools, list) or len(tools) <= room:
        return answer, 0
    return mcp.Result(id=answer.id, result={**answer.result, "tools": tools[:room]}), len(tools) - room


def _renamer(originals: dict[str, str]) -> Callable[[str], str]:
    """Rewrites the device's names a text mentions as the LLM is offered them, in one pass of a regex shaped as
    a trie of the names (its cost per character is bounded by a name's length, not by how many there are).
    Where one name begins another, the longer is renamed whole; the real server, replacing name by name
    (mcp_handler.py), may leave ``self_a.b`` of ``self.a.b`` when ``self.a`` came first."""
    changed = {original: name for name, original in originals.items() if original != name}
    if not changed:
        return str
    trie: dict[str, Any] = {}
    for original in changed:
        node = trie
        for char in original:
            node = node.setdefault(char, {})
        node[""] = {}
    pattern = re.compile(_alternatives(trie))
    return lambda text: pattern.sub(lambda found: changed[found.group()], text)


def _alternatives(node: dict[str, Any]) -> str:
    """The regex of a trie's words; an ending word makes what follows optional, and greedy (longest first)."""
    branches = [re.escape(char) + _alternatives(child) for char, child in node.items() if char]
    if not branches:
        return ""
    either = branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"
    return f"(?:{either})?" if "" in node else either


def _result_text(name: str, rid: int, answer: mcp.Result | mcp.Error) -> str:
    """The text of a ``tools/call`` answer as mcp_handler.py takes it; an error answer is ``McpError``."""
    if isinstance(answer, mcp.Error):
        raise McpError(f"device tool {name!r} (id {rid}) failed: {_quoted(answer.error.message)}", WHERE, str(rid))
    result = mcp.call_result(answer)
    if isinstance(result, mcp.NotJsonRpc):  # as the real server, whatever else came is passed on
        return _quoted(_json(answer.result), MOST_RESULT_CHARS)
    texts = [c.text for c in result.content if isinstance(c.text, str)]
    if result.isError:
        why = _quoted(" ".join(texts)) or "isError without a text"
        raise McpError(f"device tool {name!r} (id {rid}) failed: {why}", WHERE, str(rid))
    return _quoted(texts[0] if texts else _json(answer.result), MOST_RESULT_CHARS)
