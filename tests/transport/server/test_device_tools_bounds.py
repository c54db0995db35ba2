"""What a device's ``tools/list`` may cost the server: tools kept, pages followed, and the strings it keeps, each
bounded; renaming in one pass. The attacks are the outside review's: one page of thousands of tools (renaming
them was quadratic: 15,000 in one 223 KiB message held every device's event loop for 5 s), and a device that
pages for ever."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pipeline.transport.device.tools import EmulatedTools
from pipeline.transport.server import device_tools
from pipeline.transport.server.device_tools import (
    MOST_NAME_CHARS,
    MOST_PAGES,
    MOST_QUOTED_CHARS,
    MOST_TOOL_CHARS,
    MOST_TOOLS,
)
from pipeline.transport.wire import mcp
from tests.transport.server.test_device_tools import FakeDevice, listed, virtual


class Pages(EmulatedTools):
    """A device whose ``tools/list`` answers are whatever ``page(cursor)`` says."""

    def __init__(self, page: Callable[[str], dict[str, Any]]) -> None:
        super().__init__()
        self.page = page

    def handle(self, payload: mcp.Payload) -> mcp.Result | mcp.Error | None:
        assert isinstance(payload, mcp.Request)
        if payload.method != "tools/list":
            return super().handle(payload)
        cursor = payload.params.cursor if isinstance(payload.params, mcp.ListParams) else ""
        return mcp.Result(id=payload.id, result=self.page(str(cursor)))


def _tool(name: str, description: str = "") -> dict[str, Any]:
    return {"name": name, "description": description, "inputSchema": {"type": "object"}}


def test_a_page_of_20000_tools_keeps_the_128_a_request_takes_and_reads_no_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: every tool was read and renamed against every other (20,000 tools: 400 million replaces)."""
    named: list[str] = []
    real_name = device_tools.llm_name

    def counted(name: str) -> str:
        named.append(name)
        return real_name(name)

    monkeypatch.setattr(device_tools, "llm_name", counted)
    tools = [_tool(f"self.t{n}.x", f"then call self.t{n + 1}.x") for n in range(20_000)]
    client = virtual(listed(FakeDevice(firmware=Pages(lambda cursor: {"tools": tools}))))
    assert len(client.tools()) == MOST_TOOLS and len(named) == MOST_TOOLS
    assert client.tools()[0].description == "then call self_t1_x"
    assert client.problems == [f"{20_000 - MOST_TOOLS} tools left out: past the {MOST_TOOLS} an LLM request takes"]


def test_a_device_that_pages_for_ever_is_followed_for_a_bounded_number_of_pages() -> None:
    """Before: every new cursor was asked for, for as long as the device kept inventing them."""

    def page(cursor: str) -> dict[str, Any]:
        return {"tools": [_tool(f"self.p{len(cursor)}")], "nextCursor": cursor + "a"}

    device = FakeDevice(firmware=Pages(page))
    client = virtual(listed(device))
    assert [m for _, _, m in device.methods()].count("tools/list") == MOST_PAGES
    assert len(client.tools()) == MOST_PAGES
    assert client.problems == [f"tools/list has more than {MOST_PAGES} pages; the list ends there"]


def test_a_cursor_no_tool_could_be_named_ends_the_list() -> None:
    device = FakeDevice(firmware=Pages(lambda cursor: {"tools": [_tool("self.a")], "nextCursor": "c" * 100_000}))
    client = virtual(listed(device))
    assert [t.name for t in client.tools()] == ["self_a"]
    assert client.problems == ["tools/list gave a cursor of 100000 characters, no tool's name; the list ends there"]


def test_a_tool_too_large_for_a_firmware_page_or_named_past_a_function_names_length_is_left_out() -> None:
    tools = [_tool("self.ok"), _tool("self." + "n" * MOST_NAME_CHARS), _tool("self.big", "d" * MOST_TOOL_CHARS)]
    client = virtual(listed(FakeDevice(firmware=Pages(lambda cursor: {"tools": tools}))))
    assert [t.name for t in client.tools()] == ["self_ok"]
    assert client.problems == [
        f"1 tools left out: a name longer than {MOST_NAME_CHARS} characters",
        f"1 tools left out: larger than {MOST_TOOL_CHARS} characters",
    ]


def test_a_devices_error_text_is_quoted_cut() -> None:
    class Refusing(EmulatedTools):
        def handle(self, payload: mcp.Payload) -> mcp.Result | mcp.Error | None:
            assert isinstance(payload, mcp.Request)
            if payload.method == "tools/list":
                return mcp.Error(id=payload.id, error=mcp.ErrorObject(message="x" * 1_000_000))
            return super().handle(payload)

    client = virtual(listed(FakeDevice(firmware=Refusing())))
    (problem,) = client.problems
    assert problem.endswith(f"... ({1_000_000 - MOST_QUOTED_CHARS} more characters)")
    assert len(problem) < MOST_QUOTED_CHARS + 100


def test_where_one_name_begins_another_the_longer_is_renamed_whole() -> None:
    tools = [_tool("self.a", "see self.a.b, self.a and self.ab"), _tool("self.a.b"), _tool("self.ab")]
    client = virtual(listed(FakeDevice(firmware=Pages(lambda cursor: {"tools": tools}))))
    assert client.tools()[0].description == "see self_a_b, self_a and self_ab"
