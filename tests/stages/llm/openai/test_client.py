"""The OpenAI-compatible backend, pure: request mapping and stream parsing (real calls: test_llm_openai_calls)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from pipeline.endpoints.cloud import ComputeProfile
from pipeline.events import CallEnd, TokenDelta, ToolCall, ToolCallDelta
from pipeline.run.endpoints import client_settings
from pipeline.settings.config import CloudConfig, ConfigError, load_config
from stages.llm import ChatRequest, Chunk, ClientOptions, LlmSettings, Message, ToolSpec
from stages.llm.openai import (
    LlmConnectionError,
    LlmProtocolError,
    LlmServerError,
    OpenAIChatBackend,
    OpenAISettings,
    SseLines,
    StreamShaper,
    redact,
    request_body,
)

QUICK = ComputeProfile("quick", ttft_ms=5, per_token_ms=1, slots=4)
KEY = "sk-lab-0123456789abcdef0123"
ASK = ChatRequest((Message("system", "Be brief."), Message("user", "What time is it?")), max_tokens=64)


def settings(base_url: str, **kwargs: Any) -> OpenAISettings:
    return OpenAISettings(base_url=base_url, model="emulated", **kwargs)


# --- the request ------------------------------------------------------------------------------


def test_request_maps_messages_tools_and_stream_options() -> None:
    request = ChatRequest(
        messages=(
            Message("system", "sys"),
            Message("user", "Turn on the light."),
            Message("assistant", "", tool_name="set_light", tool_arguments='{"on": true}'),
            Message("tool", '{"ok": true}', tool_name="set_light"),
        ),
        max_tokens=32,
        tools=(ToolSpec("set_light", "Light.", '{"type":"object"}'),),
        temperature=0.0,
        seed=7,
    )
    b = request_body(settings("http://h/v1"), request)
    assert b["stream"] is True and b["stream_options"] == {"include_usage": True}
    assert (b["model"], b["max_tokens"], b["temperature"], b["seed"]) == ("emulated", 32, 0.0, 7)
    unasked = request_body(settings("http://h/v1"), dataclasses.replace(request, temperature=None, seed=None))
    assert "temperature" not in unasked and "seed" not in unasked  # the endpoint's own, when the run asks none
    call = b["messages"][2]["tool_calls"][0]
    assert call["function"] == {"name": "set_light", "arguments": '{"on": true}'}
    assert b["messages"][3] == {"role": "tool", "tool_call_id": call["id"], "content": '{"ok": true}'}
    assert b["tools"] == [
        {
            "type": "function",
            "function": {"name": "set_light", "description": "Light.", "parameters": {"type": "object"}},
        }
    ]
    assert "stop" not in b


@pytest.mark.parametrize(
    ("style", "message_extra", "body_extra"),
    [
        ("plain", {}, {}),
        ("partial", {"partial": True}, {}),
        ("prefix", {"prefix": True}, {}),
        ("vllm", {}, {"continue_final_message": True, "add_generation_prompt": False}),
    ],
)
def test_per_sentence_requests_continue_the_answer_and_stop_at_sentence_ends(
    style: str, message_extra: dict[str, Any], body_extra: dict[str, Any]
) -> None:
    request = ChatRequest((Message("user", "hi"),), 16, stop_at_sentence=True, assistant_prefix="Hello. ")
    b = request_body(settings("http://h/v1", continuation=style), request)
    assert b["messages"][-1] == {"role": "assistant", "content": "Hello. ", **message_extra}
    assert b["stop"] == ["。", "！", "？", "；", ". ", "! ", "? "]
    assert {k: b[k] for k in body_extra} == body_extra


@pytest.mark.parametrize(
    "kwargs",
    [{"base_url": "ftp://x/v1"}, {"base_url": "localhost:8000"}, {"retries": -1}, {"continuation": "x"}],
    ids=str,
)
def test_bad_settings_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        OpenAISettings(**{"base_url": "http://h/v1", "model": "m", **kwargs})


def test_the_clients_options_are_declared_once_for_the_client_and_for_cloud() -> None:
    options = {f.name for f in dataclasses.fields(ClientOptions)}
    for cls in (OpenAISettings, CloudConfig):
        assert options <= {f.name for f in dataclasses.fields(cls)}
        assert not options & set(cls.__annotations__), f"{cls.__name__} declares an option again"
    cloud = load_config(None, {"cloud": {"retries": 2, "sentence_stops": "。|. "}}).cloud
    assert client_settings(cloud) == {**dataclasses.asdict(ClientOptions()), "retries": 2, "sentence_stops": "。|. "}
    assert OpenAISettings("http://h/v1", "m", **client_settings(cloud)).stops == ("。", ". ")


@pytest.mark.parametrize(
    ("cloud", "message"),
    [
        ({"continuation": "x"}, r"\[cloud\] continuation 'x': choose one of plain, partial, prefix, vllm"),
        ({"read_timeout_s": 0}, r"\[cloud\] connect_timeout_s and read_timeout_s must be positive"),
        ({"keepalive_s": -1}, r"\[cloud\] retries, retry_backoff_ms and keepalive_s must be >= 0"),
    ],
)
def test_a_bad_cloud_option_is_refused_naming_its_table(cloud: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, {"cloud": cloud})


def test_the_llm_roles_defaults_are_the_stages() -> None:
    role = load_config(None).llm
    assert (role.mode, role.max_tokens, role.max_calls) == ("single", 96, 12)
    asked = LlmSettings()
    assert (asked.mode, asked.max_tokens, asked.max_calls) == (role.mode, role.max_tokens, role.max_calls)


def test_the_key_is_redacted_and_never_in_the_repr() -> None:
    assert (
        redact(f"bad key {KEY} (starts {KEY[:8]}..., ends ...{KEY[-8:]})", KEY)
        == "bad key *** (starts ***..., ends ...***)"
    )
    assert KEY not in repr(OpenAIChatBackend(settings("http://h/v1"), api_key=KEY))


# --- the stream -----------------------------------------------------------------------------


def sse(*lines: bytes) -> list[dict[str, Any] | None]:
    parser = SseLines()
    out = [p for line in lines for p in parser.feed(line)]
    return out + parser.close()


def test_sse_lines_json_done_comments_and_multiline_data() -> None:
    got = sse(
        b": keep-alive\n",
        b'data: {"a": 1}\n',
        b"\n",
        b"event: x\n",
        b'data: {"b":\n',
        b"data: 2}\n",
        b"\n",
        b"data: [DONE]\n",
        b"\n",
    )
    assert got == [{"a": 1}, {"b": 2}, None]


@pytest.mark.parametrize(
    "lines",
    [
        [b'data: {"choices": [{"delta": {"content": "Hel\n', b"\n"],
        [b"data: \xff\xfe junk\n"],
        [b"data: [1, 2]\n"],
    ],
    ids=["cut-json", "not-utf8", "not-an-object"],
)
def test_malformed_sse_is_a_protocol_error(lines: list[bytes]) -> None:
    with pytest.raises(LlmProtocolError):
        sse(*lines)


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    choice.update({k: v for k, v in extra.items() if k == "stop_reason"})
    return {"choices": [choice], **{k: v for k, v in extra.items() if k != "stop_reason"}}


def shape(request: ChatRequest, *payloads: dict[str, Any]) -> list[Chunk]:
    shaper = StreamShaper(request)
    out = [c for p in payloads for c in shaper.feed(p)]
    shaper.feed(None)
    return out + shaper.finish(attempts=1)


def test_first_chunk_is_an_empty_delta_then_content_then_done_with_server_timings() -> None:
    llama_timings = {
        "prompt_n": 12,
        "prompt_ms": 80.5,
        "predicted_n": 2,
        "predicted_ms": 30.0,
        "cache_n": 4,
        "prompt_per_second": 149.1,
    }
    out = shape(
        ASK,
        chunk({"role": "assistant"}),
        chunk({"content": "Hi"}),
        chunk({"content": " there."}, "stop"),
        {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 2}, "timings": llama_timings},
    )
    assert out[:3] == [TokenDelta(""), TokenDelta("Hi"), TokenDelta(" there.")]
    done = out[3]
    assert isinstance(done, CallEnd) and (done.finish_reason, done.output_tokens, done.input_tokens) == ("stop", 2, 12)
    assert done.server_timings == (
        ("prompt_ms", 80.5),
        ("predicted_ms", 30.0),
        ("cache_n", 4.0),
        ("prompt_n", 12.0),
        ("predicted_n", 2.0),
        ("attempts", 1.0),
    )


def test_tool_call_pieces_stream_and_the_arguments_are_accumulated() -> None:
    out = shape(
        ASK,
        chunk(
            {
                "role": "assistant",
                "tool_calls": [{"index": 0, "id": "c1", "function": {"name": "set_light", "arguments": ""}}],
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"on": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "true}"}}]}, "tool_calls"),
    )
    # each streamed piece is output (the first is the call's first token, M1); the call comes whole at the end
    assert out[:3] == [ToolCallDelta("set_light"), ToolCallDelta('{"on": '), ToolCallDelta("true}")]
    assert out[3] == ToolCall("set_light", '{"on": true}')
    assert isinstance(out[4], CallEnd) and out[4].finish_reason == "tool_calls"


SENTENCE = ChatRequest((Message("user", "hi"),), 16, stop_at_sentence=True)


@pytest.mark.parametrize(
    ("payloads", "ending", "complete"),
    [
        ([chunk({"content": "Hello"}, "stop", stop_reason=". ")], ".", False),  # vLLM / emulator name it
        ([chunk({"content": "Bye."}, "stop", stop_reason=None)], "", True),  # ended by itself
        ([chunk({"content": "Hello"}, "stop")], ".", False),  # unnamed: inferred from the missing full stop
        ([chunk({"content": "Hi"}, "stop", stop_reason="\n")], "", False),  # a hit with nothing visible to put back
        ([chunk({"content": "你好"}, "stop")], "。", False),
        ([chunk({"content": "Bye!"}, "stop")], "", True),
        ([chunk({"content": ""}, "stop")], "", True),  # nothing more to say
        ([chunk({"content": "Hello wor"}, "length")], "", False),
    ],
)
def test_per_sentence_calls_put_the_stop_sequence_back_and_say_whether_the_answer_is_complete(
    payloads: list[dict[str, Any]], ending: str, complete: bool
) -> None:
    out = shape(SENTENCE, *payloads)
    done = out[-1]
    assert isinstance(done, CallEnd) and done.answer_complete is complete
    texts = [c.text for c in out if isinstance(c, TokenDelta)]
    assert (texts[-1] if ending else "") == ending


def test_stream_errors_and_truncation() -> None:
    with pytest.raises(LlmServerError, match="overloaded"):
        shape(ASK, {"error": {"message": "overloaded"}})
    with pytest.raises(LlmProtocolError, match="choices"):
        shape(ASK, {"id": "x"})
    shaper = StreamShaper(ASK)
    shaper.feed(chunk({"content": "Hi"}))
    with pytest.raises(LlmConnectionError, match="ended before"):
        shaper.finish(attempts=1)
