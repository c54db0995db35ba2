"""The emulated device's MCP server: the JSON-RPC 2.0 methods a xiaozhi firmware answers over its link.

The firmware (main/mcp_server.cc) answers ``initialize``, ``tools/list`` and ``tools/call`` inside
``{"type": "mcp", "payload": ...}`` messages; a server learns the device's tools from it and calls them
during a turn. This module reproduces those answers, their error texts included, for three tools with
the firmware's names: the device status, the speaker volume and a light per room. The device keeps
its state, so a status call shows what earlier calls set.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from msgspec import UNSET

from pipeline.transport.wire import mcp

PROTOCOL_VERSION = "2024-11-05"
SERVER_NAME = "voice-latency-lab-emulator"  # the firmware sends its BOARD_NAME
SERVER_VERSION = "1.0.0"  # the firmware sends its app version
MAX_LIST_PAYLOAD = 8000  # mcp_server.cc GetToolsList: one tools/list answer stays below this many bytes

__all__ = ["DeviceState", "EmulatedTools", "McpArgumentError"]


class McpArgumentError(ValueError):
    """An argument the tool cannot take; the text is the firmware's."""


@dataclass(frozen=True, slots=True)
class Prop:
    """One tool argument as mcp_server.h's Property: a type, optionally a default and an integer range."""

    name: str
    kind: str  # "boolean", "integer", "string"
    default: bool | int | str | None = None
    minimum: int | None = None
    maximum: int | None = None

    def schema(self) -> mcp.PropertySchema:
        return mcp.PropertySchema(
            type=self.kind,
            default=UNSET if self.default is None else self.default,
            minimum=UNSET if self.minimum is None else self.minimum,
            maximum=UNSET if self.maximum is None else self.maximum,
        )

    def take(self, value: object) -> bool | int | str | None:
        """The argument's value, or None when it is absent or of another type (mcp_server.cc DoToolCall)."""
        if self.kind == "boolean" and isinstance(value, bool):
            return value
        if self.kind == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
            number = int(value)  # cJSON valueint
            if self.minimum is not None and number < self.minimum:
                raise McpArgumentError(f"Value is below minimum allowed: {self.minimum}")
            if self.maximum is not None and number > self.maximum:
                raise McpArgumentError(f"Value exceeds maximum allowed: {self.maximum}")
            return number
        if self.kind == "string" and isinstance(value, str):
            return value
        return None


Result = bool | int | str | dict[str, Any]


@dataclass(frozen=True, slots=True)
class FirmwareTool:
    """One tool the emulated firmware offers: its name and description as listed, its arguments, what it does."""

    name: str
    description: str
    props: tuple[Prop, ...]
    run: Callable[[dict[str, Any]], Result]

    def listing(self) -> mcp.ListedTool:
        required = [p.name for p in self.props if p.default is None]
        schema = mcp.InputSchema(properties={p.name: p.schema() for p in self.props}, required=required or UNSET)
        return mcp.ListedTool(name=self.name, description=self.description, inputSchema=schema)


@dataclass(slots=True)
class DeviceState:
    """What the tools change and the status reports."""

    volume: int = 70  # audio_codec.h: output_volume_ = 70
    lights: dict[str, bool] = field(default_factory=dict)

    def status(self) -> dict[str, Any]:
        """As boards/common/wifi_board.cc GetDeviceStatusJson (no battery, no chip sensor), plus the lights."""
        return {
            "audio_speaker": {"volume": self.volume},
            "screen": {},
            "network": {"type": "wifi", "ssid": "lab", "signal": "strong"},
            "lights": dict(self.lights),
        }


class EmulatedTools:
    """The device's MCP server: answers one request payload as the firmware does, keeping the device's state."""

    def __init__(self, state: DeviceState | None = None) -> None:
        self.state = state if state is not None else DeviceState()
        self.tools = self._tools()

    def _tools(self) -> tuple[FirmwareTool, ...]:
        return (
            FirmwareTool(
                "self.get_device_status",
                "Provides the real-time information of the device, including the current status of the audio "
                "speaker, screen, battery, network, etc.\nUse this tool for: \n1. Answering questions about "
                "current condition (e.g. what is the current volume of the audio speaker?)\n2. As the first step "
                "to control the device (e.g. turn up / down the volume of the audio speaker, etc.)",
                (),
                lambda _args: self.state.status(),
            ),
            FirmwareTool(
                "self.audio_speaker.set_volume",
                "Set the volume of the audio speaker. If the current volume is unknown, you must call "
                "`self.get_device_status` tool first and then call this tool.",
                (Prop("volume", "integer", minimum=0, maximum=100),),
                self._set_volume,
            ),
            FirmwareTool(
                "self.light.set_light",
                "Turn the light in a room on or off.",
                (Prop("room", "string"), Prop("on", "boolean")),
                self._set_light,
            ),
        )

    def _set_volume(self, args: dict[str, Any]) -> Result:
        self.state.volume = int(args["volume"])
        return True

    def _set_light(self, args: dict[str, Any]) -> Result:
        self.state.lights[str(args["room"])] = bool(args["on"])
        return True

    def handle(self, payload: mcp.Payload) -> mcp.Result | mcp.Error | None:
        """The answer to a JSON-RPC request, or None where the firmware answers nothing (notifications,
        a wrong ``jsonrpc``, params that are not an object, an id that is not a number, no JSON-RPC)."""
        if not isinstance(payload, mcp.Request) or payload.jsonrpc != mcp.JSONRPC:
            return None
        if payload.method.startswith("notifications") or not isinstance(payload.id, int | float):
            return None
        number, params = int(payload.id), payload.params
        if payload.method == mcp.INITIALIZE:
            info = mcp.PeerInfo(name=SERVER_NAME, version=SERVER_VERSION)
            result = mcp.InitializeResult(protocolVersion=PROTOCOL_VERSION, capabilities={"tools": {}}, serverInfo=info)
            return _result(number, result)
        if payload.method == mcp.TOOLS_LIST:  # a cursor that is no string lists from the start, as the firmware
            cursor = params.cursor if isinstance(params, mcp.ListParams) else UNSET
            return self._list(number, cursor if isinstance(cursor, str) else "")
        if payload.method == mcp.TOOLS_CALL:
            return self._call(number, params)
        return _error(number, f"Method not implemented: {payload.method}")

    def _list(self, msg_id: int, cursor: str) -> mcp.Result | mcp.Error:
        """Tools from the one named by ``cursor``, as many as fit the firmware's payload limit."""
        found, listed, next_cursor = not cursor, [], ""
        size = len('{"tools":[')
        for tool in self.tools:
            found = found or tool.name == cursor
            if not found:
                continue
            entry = msgspec.json.encode(tool.listing()).decode("utf-8") + ","
            if size + len(entry) + 30 > MAX_LIST_PAYLOAD:
                next_cursor = tool.name
                break
            listed.append(tool.listing())
            size += len(entry)
        if not listed and self.tools:  # the firmware's answer also when the cursor names no tool
            return _error(msg_id, f"Failed to add tool {next_cursor} because of payload size limit")
        return _result(msg_id, mcp.ListResult(tools=listed, nextCursor=next_cursor or UNSET))

    def _call(self, msg_id: int, params: object) -> mcp.Result | mcp.Error:
        if isinstance(params, mcp.BadParams):  # the firmware's texts for what does not read
            return _error(msg_id, "Invalid arguments" if params.field == "arguments" else "Missing name")
        if not isinstance(params, mcp.CallParams):
            return _error(msg_id, "Missing params")
        arguments = params.arguments
        tool = next((t for t in self.tools if t.name == params.name), None)
        if tool is None:
            return _error(msg_id, f"Unknown tool: {params.name}")
        values: dict[str, Any] = {}
        try:
            for prop in tool.props:
                value = prop.take(arguments.get(prop.name)) if arguments is not None else None
                if value is None and prop.default is None:
                    return _error(msg_id, f"Missing valid argument: {prop.name}")
                values[prop.name] = prop.default if value is None else value
        except McpArgumentError as exc:
            return _error(msg_id, str(exc))
        content = [mcp.Content(type="text", text=_text(tool.run(values)))]
        return _result(msg_id, mcp.CallResult(content=content, isError=False))


def _text(value: Result) -> str:
    """A tool's return value as mcp_server.h McpTool::Call writes it into the text content."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return value


def _result(msg_id: int, result: mcp.InitializeResult | mcp.ListResult | mcp.CallResult) -> mcp.Result:
    return mcp.Result(id=msg_id, result=result)


def _error(msg_id: int, message: str) -> mcp.Error:
    return mcp.Error(id=msg_id, error=mcp.ErrorObject(message=message))
