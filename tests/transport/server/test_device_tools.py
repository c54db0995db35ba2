"""The server's MCP client (pipeline.transport.server.device_tools) against a device that answers as mcp_server.cc does,
and a device tool call measured as part of the turn: its own span and the row's ``device_tool_ms``.

Everything runs on the virtual clock, so the listing's one-second pause, a call's round trip and
a call's timeout are exact."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest

from pipeline.analysis.read import rows_from_spans
from pipeline.analysis.traces import spans_from_traces_data
from pipeline.clock import VIRTUAL_EPOCH_NS, VirtualClock, run_on_clock
from pipeline.records.turn_row import TurnRow
from pipeline.run import assembly
from pipeline.run.turn import run_turn
from pipeline.settings import config as settings_config
from pipeline.settings.config import Config
from pipeline.settings.fixtures import Question
from pipeline.tracing import names
from pipeline.tracing.export import Tracing
from pipeline.tracing.timeline import TurnTimeline
from pipeline.transport.device.tools import EmulatedTools
from pipeline.transport.server.device_tools import MOST_RESULT_CHARS, DeviceToolsClient, McpError, McpSettings
from pipeline.transport.wire import mcp
from pipeline.transport.wire.messages import Mcp, decode, encode
from tests.scenario import utterance

SID = "s-1"
T = TypeVar("T")


class FakeDevice:
    """A device's MCP end: the emulator's firmware answers (mcp_server.cc), after a delay, or never."""

    def __init__(self, delay_s: float = 0.0, silent: bool = False, firmware: EmulatedTools | None = None) -> None:
        self.firmware = firmware or EmulatedTools()
        self.sent: list[tuple[int, dict[str, Any]]] = []  # (virtual µs, payload) of each server message
        self.delay_s, self.silent = delay_s, silent
        self.client = DeviceToolsClient(self.send, SID)

    def connect(self, settings: McpSettings) -> DeviceToolsClient:
        self.client = DeviceToolsClient(self.send, SID, settings)
        return self.client

    async def send(self, message: Mcp) -> None:
        assert message.session_id == SID
        arrived = decode(encode(message))  # through the wire, as the device reads it
        assert isinstance(arrived, Mcp)
        payload = msgspec.to_builtins(message.payload)
        loop = asyncio.get_running_loop()
        self.sent.append((round(loop.time() * 1e6), payload))
        if self.silent and payload.get("method") == "tools/call":
            return
        reply = self.firmware.handle(arrived.payload)
        if reply is not None:
            answer = decode(encode(Mcp(payload=reply, session_id=SID)))
            assert isinstance(answer, Mcp)
            loop.call_later(self.delay_s, self.client.handle, answer)

    def methods(self) -> list[tuple[int, Any, str]]:
        """(virtual ms, id, method) of what the server sent."""
        return [(t // 1000, p.get("id"), p["method"]) for t, p in self.sent]


def virtual(coro: Coroutine[Any, Any, T]) -> T:
    return run_on_clock(coro, VirtualClock())


async def listed(device: FakeDevice, settings: McpSettings | None = None) -> DeviceToolsClient:
    client = device.connect(settings or McpSettings())
    await client.start()
    await asyncio.wait_for(client.ready.wait(), 5)
    return client


def test_initialize_then_tools_list_a_second_after_its_answer_as_the_real_server() -> None:
    device = FakeDevice(delay_s=0.050)
    client = virtual(listed(device))
    # initialize at 0, its answer at 50 ms, tools/list a second later (mcp_handler.py sleeps 1 s)
    assert device.methods() == [(0, 1, "initialize"), (1050, 2, "tools/list")]
    initialize = device.sent[0][1]["params"]
    assert initialize["protocolVersion"] == "2024-11-05"
    assert initialize["capabilities"]["vision"] == {"url": "http://127.0.0.1/mcp/vision/explain", "token": "lab"}
    assert {"roots", "sampling"} <= set(initialize["capabilities"])
    assert "params" not in device.sent[1][1]  # the first page is asked without a cursor
    assert client.problems == []


def test_the_tools_become_llm_tool_definitions_as_the_real_server_offers_them() -> None:
    client = virtual(listed(FakeDevice()))
    tools = {t.name: t for t in client.tools()}
    # dots are not allowed in an OpenAI-style function name: util.py sanitize_tool_name
    assert set(tools) == {"self_get_device_status", "self_audio_speaker_set_volume", "self_light_set_light"}
    volume = tools["self_audio_speaker_set_volume"]
    assert json.loads(volume.parameters_json) == {
        "type": "object",
        "properties": {"volume": {"type": "integer", "minimum": 0, "maximum": 100}},
        "required": ["volume"],
    }
    # a description that names another tool names it as the LLM is offered it
    assert "`self_get_device_status`" in volume.description and "self.get" not in volume.description
    assert client.executor() is client


def test_a_paged_tool_list_is_asked_for_page_by_page_by_id_2_with_the_cursor() -> None:
    pages = {
        "": {"tools": [{"name": "self.a", "description": "A", "inputSchema": {"type": "object"}}], "nextCursor": "b"},
        "b": {"tools": [{"name": "self.b", "description": "B", "inputSchema": {"type": "object"}}]},
    }

    class Paging(EmulatedTools):
        def handle(self, payload: mcp.Payload) -> mcp.Result | mcp.Error | None:
            assert isinstance(payload, mcp.Request)
            if payload.method != "tools/list":
                return super().handle(payload)
            cursor = payload.params.cursor if isinstance(payload.params, mcp.ListParams) else ""
            return mcp.Result(id=payload.id, result=pages[str(cursor)])

    device = FakeDevice(firmware=Paging())
    client = virtual(listed(device))
    assert [(i, m) for _, i, m in device.methods()] == [(1, "initialize"), (2, "tools/list"), (2, "tools/list")]
    assert device.sent[2][1]["params"] == {"cursor": "b"}
    assert [t.name for t in client.tools()] == ["self_a", "self_b"]


def test_a_failed_listing_leaves_the_device_without_tools() -> None:
    class Refusing(EmulatedTools):
        def handle(self, payload: mcp.Payload) -> mcp.Result | mcp.Error | None:
            assert isinstance(payload, mcp.Request)
            if payload.method == "tools/list":
                return mcp.Error(id=payload.id, error=mcp.ErrorObject(message="busy"))
            return super().handle(payload)

    client = virtual(listed(FakeDevice(firmware=Refusing())))
    assert client.tools() == () and client.problems == ["tools/list failed: busy"]


def test_a_tool_call_goes_to_the_device_and_comes_back_with_its_text_and_id() -> None:
    device = FakeDevice(delay_s=0.120)

    async def scenario() -> tuple[Any, int]:
        client = await listed(device)
        sent_at = asyncio.get_running_loop().time()
        result = await client.run("self_audio_speaker_set_volume", '{"volume": 30}')
        return result, round((asyncio.get_running_loop().time() - sent_at) * 1000)

    result, took_ms = virtual(scenario())
    assert (result.name, result.result, result.where, result.call_id, result.error) == (
        "self.audio_speaker.set_volume",
        "true",
        "device",
        "10000",
        "",
    )
    assert took_ms == 120
    call = device.sent[-1][1]
    assert call == {
        "jsonrpc": "2.0",
        "id": 10000,
        "method": "tools/call",
        "params": {"name": "self.audio_speaker.set_volume", "arguments": {"volume": 30}},  # the device's own name
    }
    assert device.firmware.state.volume == 30


def test_a_devices_long_answer_is_kept_cut_with_the_cut_said() -> None:
    class Chatty(EmulatedTools):
        def handle(self, payload: mcp.Payload) -> mcp.Result | mcp.Error | None:
            assert isinstance(payload, mcp.Request)
            if payload.method != "tools/call":
                return super().handle(payload)
            return mcp.Result(id=payload.id, result={"content": [{"type": "text", "text": "x" * 1_000_000}]})

    async def scenario() -> str:
        client = await listed(FakeDevice(firmware=Chatty()))
        return (await client.run("self_audio_speaker_set_volume", '{"volume": 30}')).result

    kept = virtual(scenario())
    assert kept == "x" * MOST_RESULT_CHARS + f"... ({1_000_000 - MOST_RESULT_CHARS} more characters)"


def call_fails(device: FakeDevice, name: str, arguments: str, settings: McpSettings | None = None) -> McpError:
    async def scenario() -> McpError:
        client = await listed(device, settings)
        with pytest.raises(McpError) as caught:
            await client.execute(name, arguments)
        return caught.value

    return virtual(scenario())


def test_an_error_answer_fails_the_call_with_the_devices_message() -> None:
    error = call_fails(FakeDevice(), "self_audio_speaker_set_volume", '{"volume": 300}')
    assert (
        str(error)
        == "device tool 'self.audio_speaker.set_volume' (id 10000) failed: Value exceeds maximum allowed: 100"
    )
    assert (error.where, error.call_id) == ("device", "10000")


def test_a_tool_the_device_does_not_offer_is_refused_without_asking_it() -> None:
    device = FakeDevice()
    error = call_fails(device, "set_light", "{}")
    assert "the device offers no tool 'set_light' (it offers: self.audio_speaker.set_volume" in str(error)
    assert [m for _, _, m in device.methods()] == ["initialize", "tools/list"]


def test_a_device_that_does_not_answer_fails_the_call_at_the_timeout() -> None:
    device = FakeDevice(silent=True)
    error = call_fails(device, "self_light_set_light", '{"room": "hall", "on": true}', McpSettings(call_timeout_s=2.5))
    assert str(error) == "device tool 'self.light.set_light' (id 10000): no answer within 2.5 s"


def test_closing_the_session_fails_a_call_in_flight_at_once() -> None:
    device = FakeDevice(silent=True)

    async def scenario() -> tuple[BaseException | None, float]:
        client = await listed(device)
        call = asyncio.create_task(client.execute("self_get_device_status", "{}"))
        await asyncio.sleep(0.1)
        closed_at = asyncio.get_running_loop().time()
        client.close()
        error = (await asyncio.gather(call, return_exceptions=True))[0]
        assert client.tools() == ()
        return error if isinstance(error, BaseException) else None, asyncio.get_running_loop().time() - closed_at

    error, waited_s = virtual(scenario())
    assert isinstance(error, McpError) and waited_s == 0
    assert str(error) == "device tool 'self.get_device_status' (id 10000): the device's session ended during the call"


# --- a turn --------------------------------------------------------------------

CONFIG = Config(
    asr=settings_config.AsrConfig(impl="oracle"),
    llm=settings_config.LlmConfig(impl="scripted"),
    vad=settings_config.VadConfig(impl="energy"),
    tts=settings_config.TtsConfig(impl="stub"),
)
LIGHT = Question(
    "en01",
    "en",
    "device_control",
    "Turn on the kitchen light.",
    Path("en01.wav"),
    "Okay.",
    "set_light",
    '{"room": "kitchen", "on": true}',
)
VOLUME = Question(
    "en02",
    "en",
    "device_control",
    "Set the volume to thirty.",
    Path("en02.wav"),
    "Done.",
    "set_volume",
    '{"level": 30}',
)


def device_turn(device: FakeDevice | None, question: Question, list_first: bool = True) -> TurnTimeline:
    """A turn built as ``pipeline.serve`` builds it, for a device that has (or has not yet) listed its tools."""
    engines = assembly.load_engines(CONFIG, Path("/nonexistent"))

    async def scenario() -> TurnTimeline:
        client = None
        if device is not None:
            client = device.connect(McpSettings(call_timeout_s=2.0))
            await client.start()
            if list_first:
                await client.ready.wait()
        stages = assembly.build_stages(CONFIG, engines, question, 1, device=client)
        return await run_turn(utterance(), stages, VirtualClock())

    return virtual(scenario())


def rows_and_spans(tmp_path: Path, timeline: TurnTimeline) -> tuple[TurnRow, list[Any]]:
    tracing = Tracing(tmp_path / "t.jsonl", "test")
    try:
        line = tracing.emit_turn(timeline, {names.SCHEMA: names.SCHEMA_VERSION, names.QUESTION_ID: "q"})
    finally:
        tracing.shutdown()
    spans = spans_from_traces_data(line)
    (row,) = rows_from_spans(spans)
    return row, spans


def test_a_device_tool_call_is_a_span_of_its_own_and_the_row_holds_its_round_trip(tmp_path: Path) -> None:
    device = FakeDevice(delay_s=0.120)
    timeline = device_turn(device, LIGHT)
    assert timeline.ok, timeline.error_message
    first, _follow = timeline.calls
    assert first.tool_name == "self_light_set_light"  # the manifest's set_light, as the device lists it
    (tool,) = timeline.tools
    assert (tool.name, tool.where, tool.call_id, tool.error) == ("self.light.set_light", "device", "10000", "")
    assert device.firmware.state.lights == {"kitchen": True}
    row, spans = rows_and_spans(tmp_path, timeline)
    assert [s.name for s in spans if s.name in (names.TOOL, names.DEVICE_TOOL_CALL)] == [names.DEVICE_TOOL_CALL]
    (span,) = [s for s in spans if s.name == names.DEVICE_TOOL_CALL]
    assert span.attributes == {
        names.TOOL_NAME: "self.light.set_light",
        names.TOOL_WHERE: "device",
        names.RPC_REQUEST_ID: "10000",
        names.OK: True,
    }
    assert row.device_tool_ms == 120.0  # the device answered 120 ms after the call went (virtual clock)
    assert row.ok == 1


def test_the_device_tools_lengthen_the_prompt_the_llm_is_given() -> None:
    with_device = device_turn(FakeDevice(), LIGHT)
    pretend = device_turn(None, LIGHT)
    assert pretend.tools[0].where == "" and with_device.tools[0].where == "device"
    # the firmware's descriptions and schemas are longer than the lab's two pretend tools
    assert with_device.calls[0].input_tokens > pretend.calls[0].input_tokens > 0


def test_tools_listed_after_the_turn_began_are_offered_when_the_llm_is_asked() -> None:
    device = FakeDevice()
    timeline = device_turn(device, LIGHT, list_first=False)  # listing takes 1 s; the LLM is asked at 2.7 s
    assert timeline.ok, timeline.error_message
    assert [t.where for t in timeline.tools] == ["device"]


def test_a_scripted_argument_is_renamed_to_the_devices_one() -> None:
    device = FakeDevice()
    timeline = device_turn(device, VOLUME)  # the manifest says "level", the firmware's tool takes "volume"
    assert timeline.ok, timeline.error_message
    assert device.firmware.state.volume == 30


def test_a_failed_device_call_fails_the_turn_and_its_span_says_why(tmp_path: Path) -> None:
    device = FakeDevice(silent=True)
    timeline = device_turn(device, LIGHT)
    assert (timeline.ok, timeline.error_type) == (False, "McpError")
    assert timeline.error_message == "device tool 'self.light.set_light' (id 10000): no answer within 2 s"
    row, spans = rows_and_spans(tmp_path, timeline)
    (span,) = [s for s in spans if s.name == names.DEVICE_TOOL_CALL]
    assert span.attributes[names.OK] is False and span.status_code == names.STATUS_ERROR
    assert span.attributes[names.ERROR_MESSAGE] == timeline.error_message
    assert row.device_tool_ms == 2000.0 and row.error == "McpError"


def test_without_device_tools_the_turn_is_todays() -> None:
    timeline = device_turn(None, LIGHT)
    assert timeline.ok, timeline.error_message
    (tool,) = timeline.tools
    assert (tool.name, tool.where, tool.call_id) == ("set_light", "", "")
    assert timeline.start_ns >= VIRTUAL_EPOCH_NS


def test_a_call_the_link_cannot_carry_fails_as_the_devices_own_failure() -> None:
    class Gone(FakeDevice):
        async def send(self, message: Mcp) -> None:
            if isinstance(message.payload, mcp.Request) and message.payload.method == "tools/call":
                raise ConnectionError("the device's link is closed")
            await super().send(message)

    error = call_fails(Gone(), "self_get_device_status", "{}")
    assert (
        str(error) == "device tool 'self.get_device_status' (id 10000): could not be sent: the device's link is closed"
    )
    assert error.call_id == "10000"
