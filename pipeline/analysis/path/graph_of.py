"""A turn's spans -> its dependency graph (``graph_of``): the server's stages point by point, then the
answer played (``playback``).

A point waits on what the pipeline makes it wait on: ASR on the end-point; a call on the transcript,
or on the tool round trip before it; a sentence's cut on its call's first token (or the previous
cut); its TTS on the cut and on the previous sentence's TTS (one synthesiser). A device's turn over a
transport needs its server's turn too (``turns.servers_of``): its end of speech reaches the server
(uplink) before the server's stages begin.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.analysis.path.builder import Builder, SentenceTts, attr_int
from pipeline.analysis.path.graph import PathError, TurnGraph
from pipeline.analysis.path.playback import over_the_wire, played
from pipeline.analysis.traces import ReadSpan
from pipeline.analysis.turns import TurnSpans
from pipeline.records.path import (
    ASR,
    ENDPOINTING,
    HANDOFF,
    LLM_FIRST_TOKEN,
    LLM_GENERATION,
    QUEUE,
    TOOL,
    TTS,
    TTS_FIRST_FRAME,
    UPLINK,
)
from pipeline.tracing import names


def graph_if_any(t: TurnSpans, server: TurnSpans | None = None) -> TurnGraph | None:
    """``graph_of``, or None where the spans give no graph (a report leaves such a turn out of its paths)."""
    try:
        return graph_of(t, server)
    except PathError:
        return None


def graph_of(t: TurnSpans, server: TurnSpans | None = None) -> TurnGraph:
    """The turn's graph; ``PathError`` names what it lacks (a failed turn has no path). A device's turn
    (over a transport) needs its server's turn too (``turns.servers_of``: both ends' traces read together):
    its path crosses the wire twice."""
    a = t.turn.attributes
    where = _where(t)
    if a.get(names.OK) is not True:
        raise PathError(f"{where}: failed ({a.get(names.ERROR_TYPE) or 'not ok'}): a failed turn has no path")
    device = t.first(names.DEVICE)
    if device is not None and server is None:
        raise PathError(
            f"{where}: a device's view without its server's spans: read the server's traces beside the device's"
        )
    stages = server if server is not None else t
    speech_end = t.turn.event_ns(names.EV_USER_SPEECH_END)
    if speech_end is None:
        raise PathError(f"{where}: no {names.EV_USER_SPEECH_END} event on the turn: the path starts there")
    b = Builder(speech_end)
    heard = 0
    if device is not None:
        arrived = stages.turn.event_ns(names.EV_USER_SPEECH_END)
        if arrived is None:
            raise PathError(f"{where}: the server's turn has no {names.EV_USER_SPEECH_END} event")
        heard = b.add("speech end reaches the server", UPLINK, speech_end, arrived, [(0, HANDOFF)])
    tts = _server(b, stages, heard, where)
    playback = t.first(names.PLAYBACK)
    if playback is None:
        raise PathError(f"{where}: no {names.PLAYBACK} span: the path ends where the answer plays")
    if device is None:
        first_audible, last_played = played(b, tts, playback, where)
    else:
        first_audible, last_played = over_the_wire(b, stages, device, tts, playback, where)
    return TurnGraph(
        where,
        str(a.get(names.RUN_ID) or ""),
        str(a.get(names.CONDITION) or ""),
        str(a.get(names.QUESTION_ID) or ""),
        attr_int(a.get(names.ROUND)),
        attr_int(a.get(names.DEVICE_INDEX)),
        tuple(b.points),
        first_audible,
        last_played,
        _remote_llm(stages),
        _sentence_texts(stages),
        len(stages.spans(names.LLM_CALL)),
    )


def _where(t: TurnSpans) -> str:
    """The turn, as messages name it: "turn RUN QUESTION round N" (and "device M")."""
    a = t.turn.attributes
    device = f" device {attr_int(a.get(names.DEVICE_INDEX))}" if names.DEVICE_INDEX in a else ""
    run, question = a.get(names.RUN_ID) or "?", a.get(names.QUESTION_ID) or "?"
    return f"turn {run} {question} round {attr_int(a.get(names.ROUND))}{device}"


def _remote_llm(stages: TurnSpans) -> bool:
    """Whether the LLM was reached over a network: a call names its server, or the endpoint is a URL or a cloud."""
    endpoint_text = str(stages.turn.attributes.get(names.LLM_ENDPOINT) or "")
    calls = stages.spans(names.LLM_CALL)
    return any(names.SERVER_ADDRESS in c.attributes for c in calls) or endpoint_text.startswith(
        ("emulated cloud", "http")
    )


def _server(b: Builder, t: TurnSpans, heard: int, where: str) -> list[SentenceTts]:
    """The server's stages from the end of speech it heard (point ``heard``): end-point, transcript, calls,
    each sentence's TTS."""
    vad, asr = t.first(names.VAD), t.first(names.ASR)
    calls = sorted(t.spans(names.LLM_CALL), key=lambda s: attr_int(s.attributes.get(names.CALL_INDEX)))
    missing = [
        what
        for what, found in (
            (f"a {names.VAD} span", vad),
            (f"an {names.ASR} span", asr),
            (f"an {names.LLM_CALL} span", calls or None),
        )
        if found is None
    ]
    if missing:
        raise PathError(f"{where}: no {', no '.join(missing)}: the path needs them")
    assert vad is not None and asr is not None
    endpoint = b.add("end-point", ENDPOINTING, b.at[heard], vad.end_ns, [(heard, HANDOFF)])
    before_call = b.add("transcript", ASR, asr.start_ns, asr.end_ns, [(endpoint, HANDOFF)])
    return _synthesised(b, t, _calls(b, t, calls, before_call, where), where)


def _calls(b: Builder, t: TurnSpans, calls: Sequence[ReadSpan], after: int, where: str) -> dict[int, int]:
    """Each call's queue wait, first token, sentence cuts, end, and the tool round trips between calls;
    returns sentence index -> its cut's point."""
    queues = {attr_int(q.attributes.get(names.CALL_INDEX)): q for q in t.spans(names.LLM_QUEUE)}
    tools = sorted((*t.spans(names.TOOL), *t.spans(names.DEVICE_TOOL_CALL)), key=lambda s: s.start_ns)
    sentences = sorted(t.spans(names.SENTENCE), key=lambda s: attr_int(s.attributes.get(names.SENTENCE_INDEX)))
    cuts: dict[int, int] = {}
    for n, call in enumerate(calls):
        c = attr_int(call.attributes.get(names.CALL_INDEX))
        first_ns = call.event_ns(names.EV_FIRST_TOKEN)
        if first_ns is None:
            raise PathError(f"{where}: llm.call {c} has no {names.EV_FIRST_TOKEN} event")
        request = call.start_ns
        queue = queues.get(c)
        if queue is not None:
            inside = queue.end_ns > call.start_ns
            start = call.start_ns if inside else queue.start_ns
            after = b.add(f"call {c} queue", QUEUE, start, queue.end_ns, [(after, HANDOFF)], call=c)
            request = max(queue.end_ns, call.start_ns)
        point = b.add(f"call {c} first token", LLM_FIRST_TOKEN, request, first_ns, [(after, HANDOFF)], call=c)
        for s in sentences:
            if attr_int(s.attributes.get(names.SENTENCE_CALL)) != c:
                continue
            k = attr_int(s.attributes.get(names.SENTENCE_INDEX))
            point = b.add(f"sentence {k} cut", LLM_GENERATION, b.at[point], s.end_ns, [(point, HANDOFF)], call=c)
            cuts[k] = point
        after = b.add(f"call {c} end", LLM_GENERATION, b.at[point], call.end_ns, [(point, HANDOFF)], call=c)
        later = calls[n + 1].start_ns if n + 1 < len(calls) else None
        for tool in tools:
            if tool.start_ns >= first_ns and (later is None or tool.start_ns < later):
                name = tool.attributes.get(names.TOOL_NAME) or ""
                after = b.add(f"tool {name}".strip(), TOOL, tool.start_ns, tool.end_ns, [(after, HANDOFF)], call=c)
    return cuts


def _sentence_texts(t: TurnSpans) -> tuple[str, ...]:
    sentences = sorted(t.spans(names.SENTENCE), key=lambda s: attr_int(s.attributes.get(names.SENTENCE_INDEX)))
    return tuple(str(s.attributes.get(names.SENTENCE_TEXT) or "") for s in sentences)


def _synthesised(b: Builder, t: TurnSpans, cuts: dict[int, int], where: str) -> list[SentenceTts]:
    """Each sentence's TTS: after its cut and after the previous sentence's TTS (one synthesiser)."""
    spans = sorted(t.spans(names.TTS), key=lambda s: attr_int(s.attributes.get(names.SENTENCE_INDEX)))
    if not spans:
        raise PathError(f"{where}: no {names.TTS} span: the path needs one")
    out: list[SentenceTts] = []
    for span in spans:
        k = attr_int(span.attributes.get(names.SENTENCE_INDEX))
        if k not in cuts:
            raise PathError(f"{where}: TTS of sentence {k} has no sentence span with its cut")
        frame = span.event_ns(names.EV_FIRST_FRAME)
        if frame is None:
            raise PathError(f"{where}: TTS of sentence {k} has no {names.EV_FIRST_FRAME} event")
        waits = [(cuts[k], HANDOFF)] + ([(out[-1].done, HANDOFF)] if out else [])
        first = b.add(f"sentence {k} first frame", TTS_FIRST_FRAME, span.start_ns, frame, waits, sentence=k)
        done = b.add(f"sentence {k} synthesised", TTS, frame, span.end_ns, [(first, HANDOFF)], sentence=k)
        out.append(SentenceTts(k, first, done, attr_int(span.attributes.get(names.AUDIO_MS))))
    return out
