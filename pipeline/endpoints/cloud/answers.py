"""What the emulated cloud says: short answers in the question's language, device tool calls, stops.

The answer is a deterministic pick from a small bank keyed by a hash of the question (or the
manifest's answer when the run hands one in); ``max_tokens`` and ``stop`` are honoured and a
trailing assistant message is continued (per-sentence mode).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

_TOKEN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|\s*[A-Za-z0-9']+|\s*[^\sA-Za-z0-9'\u3400-\u9fff]|\s+")
_CJK = re.compile(r"[\u3400-\u9fff]")

ANSWERS = {
    "en": (
        "Sure. Here is the short answer. Let me know if you want more detail.",
        "Good question! The quick answer is yes, most of the time. It depends a little on where you are.",
        "I can help with that. It usually takes about ten minutes. Would you like a reminder?",
        "That is an interesting one. Most people get it wrong at first. The simple version is below.",
        "Okay. I looked it up for you. The answer is about three hundred.",
        "Of course. Here is what I know. It started a long time ago, in the early nineteen hundreds.",
        "Let me think. The best choice is the first one. It is cheaper and faster.",
        "Happy to help! Try a warm drink and a short walk. You will feel better soon.",
    ),
    "zh": (
        "好的。这个问题的答案很简单。还想了解更多吗？",
        "这是个好问题！一般来说是可以的。具体要看你在哪里。",
        "我来帮你。大概需要十分钟。要不要我提醒你？",
        "嗯，这个问题挺有意思。很多人第一次都会答错。简单地说，答案是三百左右。",
        "好的，我帮你查了一下。结果是大约三百个。",
        "当然可以。这件事发生在很久以前。大约是在二十世纪初。",
        "让我想想。第一个选择最好。它更便宜，也更快。",
        "没问题！喝点热水，出去走一走。你很快就会好起来的。",
    ),
}
T = TypeVar("T")
TOOL_DONE = {"en": "Done. I have taken care of that for you.", "zh": "好的，已经帮你办好了。"}


def tokens_of(text: str) -> list[str]:
    """Roughly a tokenizer's split: one CJK character or one word (with its leading space) a token."""
    return _TOKEN.findall(text)


def language_of(text: str) -> str:
    return "zh" if _CJK.search(text) else "en"


def pick_answer(question: str) -> str:
    language = language_of(question)
    digest = hashlib.sha256(question.strip().encode("utf-8")).digest()
    bank = ANSWERS[language]
    return bank[int.from_bytes(digest[:4], "big") % len(bank)]


def pick_tool(question: str, offered: set[str]) -> tuple[str, str] | None:
    """A device-control question becomes a tool call when the tool is offered."""
    q = question.lower()
    if "set_light" in offered and ("light" in q or "lamp" in q or "灯" in q):
        on = not any(w in q for w in ("off", "关"))
        return "set_light", json.dumps({"on": on})
    if "set_volume" in offered and any(w in q for w in ("volume", "louder", "quieter", "音量", "声音")):
        number = re.search(r"\d+", q)
        return "set_volume", json.dumps({"level": int(number.group()) if number else 30})
    return None


@dataclass(frozen=True, slots=True)
class StreamPlan:
    """What one request will stream: text tokens or a tool call, and how it finishes."""

    pieces: tuple[str, ...]
    finish_reason: str
    stop_reason: str | None = None
    tool: tuple[str, str] | None = None
    prompt_tokens: int = 0


class BadRequest(ValueError):
    """The request is not a chat completion request this server understands: OpenAI's 400, with the
    parameter it names (``tools[0].function``) and its code (``invalid_type``, ``missing_required_parameter``)."""

    def __init__(self, message: str, param: str | None = None, code: str | None = "invalid_value") -> None:
        super().__init__(message)
        self.param, self.code = param, code


def _a(value: object) -> str:
    """A JSON value's type as OpenAI's errors name it: "a string", "an object"..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    names = {int: "an integer", float: "a number", str: "a string", list: "an array", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def _typed(value: object, kind: type[T], param: str) -> T:
    """``value``, or OpenAI's refusal of a parameter of the wrong type."""
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        expected = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}[kind]
        message = f"Invalid type for '{param}': expected {expected}, but got {_a(value)} instead."
        raise BadRequest(message, param, "invalid_type")
    return value


def _required(fields: Mapping[str, Any], name: str, param: str) -> object:
    if fields.get(name) is None:
        raise BadRequest(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")
    return fields[name]


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise BadRequest("'messages' must be a non-empty list of objects", "messages")
    return messages


def _stops(body: Mapping[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return [s for s in stop if s]
    raise BadRequest("'stop' must be a string or a list of strings", "stop")


def offered_tools(body: Mapping[str, Any]) -> set[str]:
    """The names of the functions ``tools`` offers; ``BadRequest`` where OpenAI refuses the list."""
    tools = body.get("tools")
    if tools is None:
        return set()
    names: set[str] = set()
    for i, tool in enumerate(_typed(tools, list, "tools")):
        fields = _typed(tool, dict, f"tools[{i}]")
        function = _typed(_required(fields, "function", f"tools[{i}].function"), dict, f"tools[{i}].function")
        names.add(_typed(_required(function, "name", f"tools[{i}].function.name"), str, f"tools[{i}].function.name"))
    return names


def include_usage(body: Mapping[str, Any]) -> bool:
    """Whether a stream ends with a usage chunk (``stream_options.include_usage``); ``BadRequest`` where OpenAI
    refuses the options, before anything is streamed."""
    options = body.get("stream_options")
    if options is None:
        return False
    wanted = _typed(options, dict, "stream_options").get("include_usage")
    return wanted is not None and _typed(wanted, bool, "stream_options.include_usage")


def plan_reply(body: Mapping[str, Any], answers: Mapping[str, str] | None = None) -> StreamPlan:
    """Decide the reply to a chat request (pure: the same request always gets the same plan)."""
    messages = _messages(body)
    max_tokens = body.get("max_tokens", 256)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise BadRequest("'max_tokens' must be a positive integer", "max_tokens")
    stops = _stops(body)
    prompt_tokens = sum(len(tokens_of(str(m.get("content") or ""))) for m in messages)
    question = next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")
    offered = offered_tools(body)
    include_usage(body)  # refused here, not once the stream has begun
    answered_tool = any(m.get("role") == "tool" for m in messages)
    if not answered_tool and (tool := pick_tool(question, offered)):
        return StreamPlan((), "tool_calls", tool=tool, prompt_tokens=prompt_tokens)
    language = language_of(question)
    text = TOOL_DONE[language] if answered_tool else (answers or {}).get(question.strip()) or pick_answer(question)
    last = messages[-1]
    prefix = str(last.get("content") or "") if last.get("role") == "assistant" else ""
    remaining = text[len(prefix) :] if prefix and text.startswith(prefix) else ("" if prefix else text)
    stop_reason = None
    hits = [(remaining.find(s), s) for s in stops if remaining.find(s) >= 0]
    if hits:
        at, stop_reason = min(hits)
        remaining = remaining[:at]
    pieces = tokens_of(remaining)
    if len(pieces) > max_tokens:
        return StreamPlan(tuple(pieces[:max_tokens]), "length", prompt_tokens=prompt_tokens)
    return StreamPlan(tuple(pieces), "stop", stop_reason, prompt_tokens=prompt_tokens)
