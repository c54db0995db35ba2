"""The run behind a server: each device turn's stages, each connection's history, each finished turn traced.

A server (``pipeline.serve``, the xiaozhi front doors) asks for a turn's stages when a device
starts one and hands back the timeline when it ends; this is what answers, from the run's
settings and engines. It knows a turn's request only by the fields it reads (``ServedRequest``),
so the run never imports the transport that serves it.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, Protocol

from pipeline.events import AudioOut, Event, Sentence
from pipeline.run.assembly import build_stages, build_tts
from pipeline.run.inputs import written_language
from pipeline.run.session import Run, TraceSink, exchange, keep_history, turn_attributes
from pipeline.run.turn import ServerStages
from pipeline.settings.fixtures import AUTO, Question, QuestionSet
from pipeline.tracing.export import Tracing
from pipeline.tracing.timeline import TurnTimeline
from stages.llm import Message, ToolSource


class ServedRequest(Protocol):
    """What the run reads of a device's turn request."""

    @property
    def session_id(self) -> str: ...
    @property
    def mode(self) -> str: ...
    @property
    def question_id(self) -> str: ...
    @property
    def round(self) -> int: ...
    @property
    def traceparent(self) -> str: ...
    @property
    def started_by(self) -> str: ...
    @property
    def device(self) -> ToolSource | None: ...


class ServedTurns:
    """Each turn's stages from the run's settings, each connection's history, each finished turn traced.

    ``language`` is what a turn that names no known question is heard in (``AUTO``: detected);
    ``note`` says how the server behaves, written on every turn's span.
    """

    def __init__(self, run: Run, tracing: Tracing, sink: TraceSink, language: str, note: str = "") -> None:
        self.run, self.tracing, self.sink, self.language, self.note = run, tracing, sink, language, note
        self.by_id = {q.id: q for q in run.questions.questions}
        self.history: dict[str, list[Message]] = {}
        self.replies: dict[str, list[bytes]] = {}
        self.count = 0
        self.unwritten: OSError | None = None  # why a finished turn's records could not be written
        self.unrecorded: list[str] = []  # those turns, each in a few words
        self.records_failed = asyncio.Event()  # set then: the server stops rather than serve unrecorded

    def question(self, request: ServedRequest) -> Question:
        known = self.by_id.get(request.question_id)
        if known is not None:
            return known
        return Question(request.question_id or "live", self.language or AUTO, "", "", Path())

    def stages(self, request: ServedRequest) -> ServerStages:
        """The turn's stages; a device that speaks MCP (``request.device``) has its own tools offered to
        the LLM once it has listed them (read when the LLM is asked, not now: the list may be on its way)."""
        history = tuple(self.history.get(request.session_id, ()))
        return build_stages(
            self.run.config, self.run.engines, self.question(request), self.salt(request), history, request.device
        )

    def salt(self, request: ServedRequest) -> int:
        """What seeds a turn's scripted latencies: the question and round the device names, so the draws do not
        depend on how many listeners the server built before it (one after every end-point); a turn that names
        none takes the next number."""
        if request.question_id:
            return zlib.crc32(f"{request.question_id}\0{request.round}".encode()) & 0x7FFFFFFF
        self.count += 1
        return self.count

    def finished(self, request: ServedRequest, timeline: TurnTimeline) -> None:
        if timeline.ok:
            kept = keep_history(
                self.history.get(request.session_id, []) + exchange(timeline), self.run.config.llm.history_rounds
            )
            self.history[request.session_id] = kept
        note = (
            f"device session {request.session_id[:8]}, listen mode {request.mode}, started by {request.started_by}"
            + (f"; {self.note}" if self.note else "")
        )
        attrs = turn_attributes(self.run, self.question(request), request.round, note, None)
        try:
            self.sink(self.tracing.emit_turn(timeline, attrs, request.traceparent))
        except OSError as exc:  # the trace folder's disk is full: every later turn would go unrecorded too
            self.unwritten = self.unwritten or exc
            # said where the operator reads why the server stopped: the turn is accounted for, if not recorded
            how = "ok" if timeline.ok else f"failed {timeline.error_type}"
            self.unrecorded.append(f"{request.question_id or 'live'} round {request.round} ({how})")
            self.records_failed.set()

    def ended(self, session_id: str) -> None:
        """A session's history goes with it: a server up for days sees a new session at every reconnection."""
        self.history.pop(session_id, None)

    async def cached_reply(self, text: str, session_id: str) -> list[bytes]:
        """``text`` spoken once by the run's TTS and kept, as 60 ms frames; the session's history gets it
        (``session_id`` "": made ahead, for no session)."""
        if text not in self.replies:
            self.replies[text] = await self.speak(text)
        if session_id and self.run.config.llm.history_rounds:
            self.history.setdefault(session_id, []).append(Message("assistant", text))
        return self.replies[text]

    async def speak(self, text: str) -> list[bytes]:
        """``text`` through the run's TTS, untimed: audio the server has ready before anyone asks."""
        question = Question("reply", written_language(text), "", text, Path())
        tts = build_tts(self.run.config, self.run.engines, question)
        frames: list[bytes] = []
        async for event in tts.run(_one(Sentence(0, text, 0, 0))):
            if isinstance(event, AudioOut):
                frames.append(event.pcm)
        return frames


async def _one(event: Event) -> AsyncIterator[Event]:
    yield event


class RecordsUnwritten(RuntimeError):
    """A finished turn's traces or row could not be written (a full disk): the server stopped serving."""


async def first_of(*waits: Coroutine[Any, Any, object]) -> None:
    """Until the first of ``waits`` is done (the others cancelled)."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def heard_language(given: str) -> str:
    """``--language`` as the ASR is told it: a language code, or ``AUTO`` for "auto" (it detects)."""
    return AUTO if given.strip().lower() in ("auto", "") else given.strip()


def refuse_oracle_without_texts(asr: str, questions: QuestionSet) -> None:
    """The oracle ASR says the named question's reference text; with none to say, every turn would be empty."""
    if asr == "oracle" and not any(q.text for q in questions.questions):
        where = f"{questions.folder} has no reference texts" if questions.questions else "no fixtures folder was given"
        raise ValueError(
            f"the oracle ASR says each question's reference text, and {where}: pass a fixtures folder with a "
            "manifest (python -m pipeline.serve FIXTURES ...), or configure a real ASR ([asr] impl)"
        )
