"""A turn's dependency graph, rebuilt from its spans: the critical path of its silence and of the
whole turn, and the same graph re-timed (what-if).

Every moment a turn's spans record (the end-point, the transcript, each call's first token, each
sentence's cut, each TTS first frame, each sentence's audio starting to play) is a ``Point``:
work of one ``kind`` (a segment: ASR, an LLM call's first token, TTS to its first frame...) that
began once every point it waits on was done, plus the hand-off between them. Measured, a point's
start is when its span says the work began; each dependency carries the lag from that dependency
to this start, so the graph re-timed without a change gives back every measured time to the
nanosecond. A point waits on what the pipeline makes it wait on: ASR on the end-point; a call on
the transcript, or on the tool round trip before it; a sentence's cut on its call's first token
(or the previous cut); its TTS on the cut and on the previous sentence's TTS (one synthesiser);
its audio on its first frame and on the previous sentence's audio ending (one speaker). A device's
turn over a transport, read with its server's, crosses the wire: its end of speech reaches the server
(uplink), the server's stages run, the first frame is sent, received (downlink) and played (the
device's buffer); its last sample plays once the last frame has come and all before it has played.

The critical path walks back from a target (the first audible sample: the user's silence; or the
last sample played: the whole turn) through the dependency each point actually waited for (the
latest). Its segments sum exactly to the target's time from the end of speech, because they are
that time split at the points it passed. Work off the path (the rest of a generation, later
sentences' TTS) is slack: it ran beside the path and delayed nobody.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

import msgspec

from pipeline.analysis.traces import SpanRecord
from pipeline.analysis.turns import TurnSpans
from pipeline.tracing import names

# segment kinds, in the order a turn passes them; a path's columns follow this order
UPLINK = "uplink"  # a device's turn: it sent the speech-end frame -> the server had it
ENDPOINTING = "endpointing"  # end of speech -> the VAD's end-point
ASR = "asr"
QUEUE = "queue"  # a call waiting for the shared model's scheduler
LLM_FIRST_TOKEN = "llm_first_token"  # a call's request -> its first token (a remote LLM: the network too)
LLM_GENERATION = "llm_generation"  # first token -> a sentence's cut (or the next cut, or the call's end)
TOOL = "tool"  # a tool's round trip between two calls
TTS_FIRST_FRAME = "tts_first_frame"
TTS = "tts"  # first frame -> the synthesiser done with the sentence (a later sentence may wait on it)
DOWNLINK = "downlink"  # a device's turn: the server sent a frame -> the device had it
DEVICE_BUFFER = "device_buffer"  # first frame -> it plays (in one process: handed to the player)
PLAYBACK = "playback"  # a sentence's audio playing (the next may wait for the speaker)
HANDOFF = "handoff"  # one stage's output -> the next stage taking it up (queues, the event loop)
SEGMENTS = (
    UPLINK,
    ENDPOINTING,
    ASR,
    QUEUE,
    LLM_FIRST_TOKEN,
    LLM_GENERATION,
    TOOL,
    TTS_FIRST_FRAME,
    TTS,
    DOWNLINK,
    DEVICE_BUFFER,
    PLAYBACK,
    HANDOFF,
)
WORK = frozenset(SEGMENTS) - {HANDOFF}


class PathError(ValueError):
    """A turn whose spans cannot give its path: which span or event is missing, and in which turn."""


# msgspec structs, as the reader's records are: a graph is some thirty points, made once a turn, and a
# struct is built in C
class Dep(msgspec.Struct, frozen=True, gc=False):
    point: int  # index of the point waited on
    lag_ns: int  # that point done -> this point's work begins (negative: it did not wait for it)
    kind: str = HANDOFF  # what the lag is, on the path


class Point(msgspec.Struct, frozen=True, gc=False):
    label: str  # "call 1 first token", "sentence 0 cut", ...
    kind: str  # the segment its work is
    duration_ns: int
    deps: tuple[Dep, ...]
    call: int | None = None  # the LLM call it belongs to (queue, first token, generation)
    sentence: int | None = None


class TurnGraph(msgspec.Struct, frozen=True, gc=False):
    """One turn's points in an order where each comes after what it waits on; times are ns after the
    end of speech (point 0)."""

    turn: str  # "run_id question_id round N" (device M), for messages
    run_id: str
    condition: str
    question_id: str
    round: int
    device: int
    points: tuple[Point, ...]
    first_audible: int  # the point of the first answer audio starting to play
    last_played: int  # the point of the last sample played
    remote_llm: bool  # the LLM was reached over a network (its first tokens include a round trip)
    sentence_texts: tuple[str, ...]
    calls: int

    def times(self, points: Sequence[Point] | None = None) -> list[int]:
        """Each point's time: measured with the graph's own points, predicted with changed ones."""
        out: list[int] = []
        for p in points or self.points:
            start = max((out[d.point] + d.lag_ns for d in p.deps), default=0)
            out.append(start + p.duration_ns)
        return out


class Step(msgspec.Struct, frozen=True, gc=False):
    kind: str
    label: str
    ns: int


class CriticalPath(msgspec.Struct, frozen=True, gc=False):
    steps: tuple[Step, ...]  # from the end of speech to the target, in time order
    total_ns: int
    slack_ns: dict[str, int]  # off-path work before the target, by kind

    def by_kind(self) -> dict[str, int]:
        out = dict.fromkeys(SEGMENTS, 0)
        for s in self.steps:
            out[s.kind] += s.ns
        return out


def critical_path(graph: TurnGraph, target: int, points: Sequence[Point] | None = None) -> CriticalPath:
    """The chain of waits that decided ``target``'s time, and the work that ran beside it."""
    pts = points or graph.points
    t = graph.times(pts)
    steps: list[Step] = []
    on_path: set[int] = set()
    i: int | None = target
    while i is not None:
        on_path.add(i)
        p = pts[i]
        if p.duration_ns:
            steps.append(Step(p.kind, p.label, p.duration_ns))
        waited = _waited_for(p, t)
        if waited is not None and waited.lag_ns:
            steps.append(Step(waited.kind, f"{pts[waited.point].label} -> {p.label}", waited.lag_ns))
        i = None if waited is None else waited.point
    steps.reverse()
    return CriticalPath(tuple(steps), t[target], _slack(pts, t, on_path, t[target]))


def _waited_for(p: Point, t: Sequence[int]) -> Dep | None:
    """The dependency that set the point's start: the latest (the first listed of equals)."""
    best: Dep | None = None
    for d in p.deps:  # of equals, one it waited for (a lag >= 0) before one done after it began
        if best is None or (t[d.point] + d.lag_ns, d.lag_ns >= 0) > (t[best.point] + best.lag_ns, best.lag_ns >= 0):
            best = d
    return best


def _slack(pts: Sequence[Point], t: Sequence[int], on_path: set[int], until: int) -> dict[str, int]:
    """Work off the path that ran before ``until``: it happened beside the path and delayed nobody."""
    out: dict[str, int] = {}
    for i, p in enumerate(pts):
        if i in on_path or p.kind not in WORK or p.duration_ns <= 0:
            continue
        end = min(t[i], until)
        ran = end - max(0, t[i] - p.duration_ns)
        if ran > 0:
            out[p.kind] = out.get(p.kind, 0) + ran
    return out


# --- building a turn's graph from its spans ---------------------------------------------------------


def _int(value: object, default: int = 0) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


class _Builder:
    """Points added in time order, each from its measured start and end (absolute ns)."""

    def __init__(self, zero_ns: int) -> None:
        self.points: list[Point] = [Point("end of speech", HANDOFF, 0, ())]
        self.at: list[int] = [zero_ns]

    def add(
        self,
        label: str,
        kind: str,
        start_ns: int,
        end_ns: int,
        waits_on: Sequence[tuple[int, str]],
        call: int | None = None,
        sentence: int | None = None,
    ) -> int:
        """A point whose work ran ``start_ns`` -> ``end_ns`` after what it ``waits_on`` (point, lag kind).
        The latest dependency done by its start is the one it waited for; one done later it did not wait
        for (its lag is negative), so re-timed without a change the point starts exactly where it did."""
        done = [(self.at[i], i, kind) for i, kind in waits_on]
        before = [d for d in done if d[0] <= start_ns]
        if not before:  # began before anything it waits on was done: counted from the earliest
            first = min(done)
            start_ns = first[0]
            before = [first]
        waited = max(before, key=_done_at)[1]  # the latest done (the first listed of equals)
        deps = tuple(Dep(i, start_ns - at if i == waited else min(0, start_ns - at), k) for at, i, k in done)
        self.points.append(Point(label, kind, end_ns - start_ns, deps, call, sentence))
        self.at.append(end_ns)
        return len(self.points) - 1


def _done_at(dep: tuple[int, int, str]) -> int:
    return dep[0]


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
    where = f"turn {a.get(names.RUN_ID) or '?'} {a.get(names.QUESTION_ID) or '?'} round {_int(a.get(names.ROUND))}" + (
        f" device {_int(a.get(names.DEVICE_INDEX))}" if names.DEVICE_INDEX in a else ""
    )
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
    b = _Builder(speech_end)
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
        first_audible, last_played = _played(b, tts, playback, where)
    else:
        first_audible, last_played = _over_the_wire(b, stages, device, tts, playback, where)
    endpoint_text = str(stages.turn.attributes.get(names.LLM_ENDPOINT) or "")
    calls = stages.spans(names.LLM_CALL)
    remote = any(names.SERVER_ADDRESS in c.attributes for c in calls) or endpoint_text.startswith(
        ("emulated cloud", "http")
    )
    return TurnGraph(
        where,
        str(a.get(names.RUN_ID) or ""),
        str(a.get(names.CONDITION) or ""),
        str(a.get(names.QUESTION_ID) or ""),
        _int(a.get(names.ROUND)),
        _int(a.get(names.DEVICE_INDEX)),
        tuple(b.points),
        first_audible,
        last_played,
        remote,
        _sentence_texts(stages),
        len(calls),
    )


def _server(b: _Builder, t: TurnSpans, heard: int, where: str) -> list[_Tts]:
    """The server's stages from the end of speech it heard (point ``heard``): end-point, transcript, calls,
    each sentence's TTS."""
    vad, asr = t.first(names.VAD), t.first(names.ASR)
    calls = sorted(t.spans(names.LLM_CALL), key=lambda s: _int(s.attributes.get(names.CALL_INDEX)))
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


def _calls(b: _Builder, t: TurnSpans, calls: Sequence[SpanRecord], after: int, where: str) -> dict[int, int]:
    """Each call's queue wait, first token, sentence cuts, end, and the tool round trips between calls;
    returns sentence index -> its cut's point."""
    queues = {_int(q.attributes.get(names.CALL_INDEX)): q for q in t.spans(names.LLM_QUEUE)}
    tools = sorted((*t.spans(names.TOOL), *t.spans(names.DEVICE_TOOL_CALL)), key=lambda s: s.start_ns)
    sentences = sorted(t.spans(names.SENTENCE), key=lambda s: _int(s.attributes.get(names.SENTENCE_INDEX)))
    cuts: dict[int, int] = {}
    for n, call in enumerate(calls):
        c = _int(call.attributes.get(names.CALL_INDEX))
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
            if _int(s.attributes.get(names.SENTENCE_CALL)) != c:
                continue
            k = _int(s.attributes.get(names.SENTENCE_INDEX))
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
    sentences = sorted(t.spans(names.SENTENCE), key=lambda s: _int(s.attributes.get(names.SENTENCE_INDEX)))
    return tuple(str(s.attributes.get(names.SENTENCE_TEXT) or "") for s in sentences)


class _Tts(msgspec.Struct, frozen=True, gc=False):
    sentence: int
    first_frame: int  # its point
    done: int  # its point
    audio_ms: int


def _synthesised(b: _Builder, t: TurnSpans, cuts: dict[int, int], where: str) -> list[_Tts]:
    """Each sentence's TTS: after its cut and after the previous sentence's TTS (one synthesiser)."""
    spans = sorted(t.spans(names.TTS), key=lambda s: _int(s.attributes.get(names.SENTENCE_INDEX)))
    if not spans:
        raise PathError(f"{where}: no {names.TTS} span: the path needs one")
    out: list[_Tts] = []
    for span in spans:
        k = _int(span.attributes.get(names.SENTENCE_INDEX))
        if k not in cuts:
            raise PathError(f"{where}: TTS of sentence {k} has no sentence span with its cut")
        frame = span.event_ns(names.EV_FIRST_FRAME)
        if frame is None:
            raise PathError(f"{where}: TTS of sentence {k} has no {names.EV_FIRST_FRAME} event")
        waits = [(cuts[k], HANDOFF)] + ([(out[-1].done, HANDOFF)] if out else [])
        first = b.add(f"sentence {k} first frame", TTS_FIRST_FRAME, span.start_ns, frame, waits, sentence=k)
        done = b.add(f"sentence {k} synthesised", TTS, frame, span.end_ns, [(first, HANDOFF)], sentence=k)
        out.append(_Tts(k, first, done, _int(span.attributes.get(names.AUDIO_MS))))
    return out


def _played(b: _Builder, tts: Sequence[_Tts], playback: SpanRecord, where: str) -> tuple[int, int]:
    """In one process: each sentence's audio plays after its first frame and after the previous sentence's
    audio (one speaker); returns (first audible point, last played point)."""
    starts = {
        _int(e.attributes.get(names.SENTENCE_INDEX)): e.time_ns
        for e in playback.events
        if e.name == names.EV_SENTENCE_AUDIO
    }
    previous_audio: int | None = None
    first_audible = -1
    for n, s in enumerate(tts):
        last = n == len(tts) - 1
        plays = playback.start_ns if n == 0 else starts.get(s.sentence)
        if plays is None:  # no start of its own recorded: it played on from the previous sentence's
            continue
        waits = [(s.first_frame, DEVICE_BUFFER)] + ([(previous_audio, HANDOFF)] if previous_audio is not None else [])
        # no work of its own: the wait for the first frame (device_buffer) or the speaker (handoff) is its lag
        audible = b.add(f"sentence {s.sentence} plays", HANDOFF, plays, plays, waits, sentence=s.sentence)
        ends = playback.end_ns if last else plays + s.audio_ms * 1_000_000
        previous_audio = b.add(
            f"sentence {s.sentence} played", PLAYBACK, plays, ends, [(audible, HANDOFF)], sentence=s.sentence
        )
        if n == 0:
            first_audible = audible
    if previous_audio is None or first_audible < 0:
        raise PathError(f"{where}: the playback span records no audio starting")
    if b.at[previous_audio] != playback.end_ns:  # the last sentence's start went unrecorded
        previous_audio = b.add(
            "played to the end", PLAYBACK, b.at[previous_audio], playback.end_ns, [(previous_audio, HANDOFF)]
        )
    return first_audible, previous_audio


def _over_the_wire(
    b: _Builder, server: TurnSpans, device: SpanRecord, tts: Sequence[_Tts], playback: SpanRecord, where: str
) -> tuple[int, int]:
    """A device's turn: the server sends the first frame once synthesised, it crosses the wire, the device
    buffers and plays it; the last sample plays once the last frame has come and everything before it
    has played. Returns (first audible point, last played point)."""
    downlink = server.first(names.DOWNLINK)
    received = device.event_ns(names.EV_FIRST_AUDIO_RECEIVED)
    audible_ns = device.event_ns(names.EV_FIRST_AUDIBLE)
    last_received = device.event_ns(names.EV_LAST_AUDIO_RECEIVED)
    missing = [
        what
        for what, found in (
            (f"a server {names.DOWNLINK} span", downlink),
            (f"the device's {names.EV_FIRST_AUDIO_RECEIVED} event", received),
            (f"the device's {names.EV_FIRST_AUDIBLE} event", audible_ns),
            (f"the device's {names.EV_LAST_AUDIO_RECEIVED} event", last_received),
        )
        if found is None
    ]
    if missing:
        raise PathError(f"{where}: no {', no '.join(missing)}: a device's path needs them")
    assert downlink is not None and received is not None and audible_ns is not None and last_received is not None
    sent = b.add("first frame sent", HANDOFF, downlink.start_ns, downlink.start_ns, [(tts[0].first_frame, HANDOFF)])
    arrived = b.add("first frame received", DOWNLINK, downlink.start_ns, received, [(sent, HANDOFF)])
    audible = b.add("first sound", DEVICE_BUFFER, received, audible_ns, [(arrived, HANDOFF)])
    last_sent = b.add("last frame sent", HANDOFF, downlink.end_ns, downlink.end_ns, [(tts[-1].done, HANDOFF)])
    last_arrived = b.add("last frame received", DOWNLINK, downlink.end_ns, last_received, [(last_sent, HANDOFF)])
    audio_ns = _int(playback.attributes.get(names.AUDIO_MS)) * 1_000_000
    back_to_back = b.add("the answer played", PLAYBACK, audible_ns, audible_ns + audio_ns, [(audible, HANDOFF)])
    # the last sample plays when everything before it has (gaps: the device waited for audio) or once the
    # last frame, come late, has played out of the buffer
    last = b.add(
        "last sample played",
        HANDOFF,
        playback.end_ns,
        playback.end_ns,
        [(back_to_back, HANDOFF), (last_arrived, PLAYBACK)],
    )
    return audible, last


# --- a turn's paths as columns ----------------------------------------------------------------------

TARGETS = {"silence": "end of speech -> first audible sample", "whole": "end of speech -> last sample played"}
PATH_COLUMNS = (
    "run_id",
    "condition",
    "question_id",
    "round",
    "device",
    *(
        column
        for target in TARGETS
        for column in (f"{target}_ms", *(f"{target}_{kind}_ms" for kind in SEGMENTS), f"{target}_slack_ms")
    ),
)


def path_columns(graph: TurnGraph) -> dict[str, object]:
    """One turn's two critical paths by segment (ms), each summing exactly to its total, and the slack
    beside each (``PATH_COLUMNS``)."""
    out: dict[str, object] = {
        "run_id": graph.run_id,
        "condition": graph.condition,
        "question_id": graph.question_id,
        "round": graph.round,
        "device": graph.device,
    }
    for target, point in (("silence", graph.first_audible), ("whole", graph.last_played)):
        path = critical_path(graph, point)
        out[f"{target}_ms"] = path.total_ns / 1e6
        for kind, ns in path.by_kind().items():
            out[f"{target}_{kind}_ms"] = ns / 1e6
        out[f"{target}_slack_ms"] = sum(path.slack_ns.values()) / 1e6
    return out


def paths_csv(graphs: Iterable[TurnGraph]) -> str:
    """Every turn's ``path_columns`` as CSV text (ms to the microsecond, as bench.csv writes them)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=PATH_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for graph in graphs:
        writer.writerow({k: round(v, 3) if isinstance(v, float) else v for k, v in path_columns(graph).items()})
    return buffer.getvalue()
