"""A scripted chat backend: answer text, optional tool call and latency are data.

It streams a known reply token by token after a scripted time to first token,
so tests and the no-model simulator exercise every call mode exactly.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from pipeline.events import CallEnd, LatencyProfile, TokenDelta, ToolCall
from stages.llm.backend import ChatRequest, Chunk, ToolSpec
from stages.registry import Implementation, TurnInputs
from stages.sentences import SplitRules, find_cut

_TOKEN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|\s*[A-Za-z0-9']+|\s*[^\sA-Za-z0-9'\u3400-\u9fff]|\s+")


def scripted_tokens(text: str) -> list[str]:
    """Split text the way a tokenizer roughly would: one CJK character or one word a token."""
    return _TOKEN.findall(text)


@dataclass(frozen=True, slots=True)
class ScriptedReply:
    """What the script says to one question: its text, and the tool it calls first ("" for none)."""

    text: str
    tool_name: str = ""
    tool_arguments: str = "{}"


class ScriptedBackend:
    """A ``ChatBackend`` that streams a known reply on a scripted latency (sampling asked of it is ignored)."""

    server_address = ""

    def __init__(self, reply: ScriptedReply, latency: LatencyProfile, model: str = "scripted", salt: int = 0) -> None:
        self.reply = reply
        self.latency = latency
        self.model = model
        self._salt = salt
        self._calls = 0

    async def stream(self, request: ChatRequest) -> AsyncIterator[Chunk]:
        delays = self.latency.delays_s(self._salt * 101 + self._calls)
        self._calls += 1
        input_tokens = sum(len(scripted_tokens(m.content)) for m in request.messages)
        # offered tools are part of the prompt, as a chat template puts them in it
        input_tokens += sum(
            len(scripted_tokens(f"{t.name} {t.description} {t.parameters_json}")) for t in request.tools
        )
        answered_tool = any(m.role == "tool" for m in request.messages)
        tool = offered(self.reply.tool_name, request.tools)
        if tool is not None and not answered_tool:
            await asyncio.sleep(next(delays))
            yield ToolCall(tool.name, fit_arguments(self.reply.tool_arguments, tool, self.reply.tool_name))
            yield CallEnd("tool_calls", output_tokens=1, input_tokens=input_tokens)
            return
        remaining = (
            self.reply.text[len(request.assistant_prefix) :]
            if self.reply.text.startswith(request.assistant_prefix)
            else self.reply.text
        )
        if request.stop_at_sentence:
            cut = find_cut(remaining, SplitRules(first_cut_at_comma=False, max_chars=10_000), first=False, final=True)
            piece = remaining[:cut] if cut is not None else remaining
        else:
            piece = remaining
        tokens = scripted_tokens(piece)
        finish = "stop"
        if len(tokens) > request.max_tokens:
            tokens, finish = tokens[: request.max_tokens], "length"
        for token in tokens:
            await asyncio.sleep(next(delays))
            yield TokenDelta(token)
        complete = finish == "stop" and not remaining[len(piece) :].strip()
        yield CallEnd(finish, output_tokens=len(tokens), input_tokens=input_tokens, answer_complete=complete)


def offered(name: str, tools: tuple[ToolSpec, ...]) -> ToolSpec | None:
    """The offered tool a script's call names: itself, or the one tool whose name ends in ``.name``
    or ``_name``.

    A script names a device's tool by its short name (``set_volume``); a xiaozhi device lists it
    under its own namespace (``self.audio_speaker.set_volume``), which a server offers the model
    with its dots made underscores (``self_audio_speaker_set_volume``, as xiaozhi-esp32-server's
    ``sanitize_tool_name``). A real LLM picks from the offered names itself: this is the script's
    problem, so it is solved here. None when no offered tool fits: the script answers without one."""
    exact = [t for t in tools if t.name == name]
    if not name or exact:
        return exact[0] if exact else None
    suffixed = [t for t in tools if t.name.endswith(("." + name, "_" + name))]
    return suffixed[0] if len(suffixed) == 1 else None


def fit_arguments(arguments: str, tool: ToolSpec, scripted_name: str) -> str:
    """A script's arguments for a tool it named by its short name, fitted to the offered schema.

    A manifest writes the lab's own tool's argument (``{"level": 30}``) where a device's tool takes
    another (``volume``): one argument the schema does not know and one required property missing
    are the same thing, renamed, as a real LLM would fill the schema it is given. Anything else,
    and a tool offered by the very name the script used, is left as written."""
    if tool.name == scripted_name:
        return arguments
    try:
        args, schema = json.loads(arguments or "{}"), json.loads(tool.parameters_json or "{}")
    except ValueError:
        return arguments
    if not isinstance(args, dict) or not isinstance(schema, dict):
        return arguments
    properties, required = schema.get("properties"), schema.get("required")
    known: dict[str, object] = properties if isinstance(properties, dict) else {}
    needed = required if isinstance(required, list) else list(known)
    unknown = [k for k in args if k not in known]
    missing = [k for k in needed if isinstance(k, str) and k not in args]
    if len(unknown) != 1 or len(missing) != 1:
        return arguments
    args[missing[0]] = args.pop(unknown[0])
    return json.dumps(args, ensure_ascii=False)


def default_answer(text: str, language: str) -> str:
    """What the scripted LLM says to a question whose manifest gives no answer."""
    if language.startswith("zh"):
        return f"好的，你问的是：{text}这是一个简短的回答。希望对你有帮助！"
    return f"Sure, you asked: {text} Here is a short answer. I hope that helps!"


@dataclass(frozen=True, slots=True)
class ScriptedSettings:
    """The ``[llm]`` keys of ``impl = "scripted"``: a label for the rows, and the latency as data."""

    model: str = "scripted"
    latency: LatencyProfile = field(
        default_factory=lambda: LatencyProfile(first_ms=350, per_item_ms=45, jitter_ms=15, seed=2)
    )


def _build(s: ScriptedSettings, _engine: None, turn: TurnInputs) -> ScriptedBackend:
    reply = ScriptedReply(turn.answer or default_answer(turn.text, turn.language), turn.tool, turn.tool_arguments)
    return ScriptedBackend(reply, s.latency.salted(turn.salt), model=s.model, salt=turn.salt)


IMPLEMENTATION = Implementation("llm", "scripted", ScriptedSettings, _build, scripted=True, label="scripted")
