"""A run's device on a call to a voice bot: each question said on the call, its turn a device's timeline as a xiaozhi
device's is, with the answer's edges inferred from its sound.

``pipeline.replay --server twilio+ws://HOST/PATH`` calls a bot on Twilio Media Streams (``twilio_call``: mu-law at 8
kHz, as a phone line carries it); ``pipecat+ws://HOST/PATH`` one on Pipecat's own wire (``pipecat_call``: protobuf
frames, 16 kHz PCM, the bot's RTVI messages); ``+wss`` for TLS. A device is one call, held for all its questions, as
a xiaozhi device holds one connection. The turn's marks are the device's: the user's end of speech where the line
carried it, the first and last audio of the answer received, its first and last audible sample as the phone's
playout buffer plays them (``phone_playout``); every turn says ``answer_edges = inferred``. Twilio's wire tells
nothing else: ``stt``, ``llm`` and the sentences stay empty. Pipecat's tells what the bot believed: its final
transcriptions are the turn's ``stt`` (and transcript), its LLM's start its ``llm``, its TTS texts the sentences,
and every RTVI message is kept as a bot mark beside what was heard (``DeviceTiming.bot_marks``).

With ``--record-audio`` each call is recorded as a device is (``phone_recording``). What a call has no part for is
refused when the device is made, not ignored: a barge-in, manual listening, the Opus encoder and jitter buffer, a
link profile, the settle wait and sound devices. Auto and realtime listening are the same here: the line carries the
caller's audio, silence or speech, for the whole call.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from urllib.parse import urlsplit, urlunsplit

import numpy as np
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from pipeline.clock import Clock
from pipeline.events import FRAME_MS, SAMPLE_RATE
from pipeline.run.device_side import Ask
from pipeline.run.recorder import TurnRecorder
from pipeline.tracing.timeline import DeviceTiming, TurnTimeline
from pipeline.transport.device.device_recording import RecordTo
from pipeline.transport.device.device_settings import DeviceSettings
from pipeline.transport.device.link import LOST, DeviceError
from pipeline.transport.device.phone_line import CallQuestion, CallTurn, Line
from pipeline.transport.device.phone_recording import CallRecording, at_rate
from pipeline.transport.device.pipecat_call import PipecatLine
from pipeline.transport.device.twilio_call import TwilioLine

SCHEMES = {"twilio+ws": "ws", "twilio+wss": "wss", "pipecat+ws": "ws", "pipecat+wss": "wss"}
WIRES: dict[str, tuple[type[Line], str]] = {  # a URL scheme's prefix -> the line, and the label's words
    "twilio": (TwilioLine, "Twilio Media Streams, mu-law 8 kHz"),
    "pipecat": (PipecatLine, "Pipecat's protobuf frames, PCM 16 kHz, RTVI"),
}
INFERRED = "inferred"  # the answer's edges found from its sound (``DeviceTiming.answer_edges``)
UNUSED = {  # a setting this wire has no part for, and what the device would do with it
    "barge_in_after_ms": "a barge-in",
    "jitter_frames": "a jitter buffer",
    "profile": "a link profile",
    "settle_ms": "a settle wait",
}


def is_phone(url: str) -> bool:
    """Whether ``url`` names a bot on a call's wire (Twilio's or Pipecat's)."""
    return urlsplit(url).scheme in SCHEMES


def wire_of(url: str) -> str:
    """The wire a call URL names: "twilio" or "pipecat"."""
    return urlsplit(url).scheme.split("+")[0]


def line_url(url: str) -> str:
    """The WebSocket URL a ``twilio+ws(s)://`` or ``pipecat+ws(s)://`` URL names."""
    parts = urlsplit(url)
    return urlunsplit((SCHEMES[parts.scheme], parts.netloc, parts.path, parts.query, ""))


def shown(url: str) -> str:
    """``url`` as a label or an error may show it: no user, password, query or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def refused(settings: DeviceSettings) -> list[str]:
    """What of ``settings`` a caller on a voice bot's line cannot do, each said; empty when nothing is."""
    plain = DeviceSettings(settings.url)
    said = [f"{what} ({name})" for name, what in UNUSED.items() if getattr(settings, name) != getattr(plain, name)]
    if settings.listen_mode == "manual":  # auto and realtime alike: the line streams for the whole call
        said.append("listen mode manual (a phone line is always open: nobody says when a question ends)")
    if settings.encoder_preset != plain.encoder_preset:
        said.append(f"the {settings.encoder_preset} encoder (the line is mu-law)")
    if settings.sound.speaker or settings.sound.voice:
        said.append("sound devices (not yet on the telephony path)")
    return said


class PhoneCaller:
    """One device calling a voice bot: ``async with`` places the call, ``turn`` asks one question on it (what the
    caller dropped of the bot's messages in the turn on its row, by why)."""

    def __init__(self, settings: DeviceSettings, clock: Clock, record: RecordTo | None = None) -> None:
        if not is_phone(settings.url):
            raise ValueError(f"{settings.url!r}: a twilio+ws(s):// or pipecat+ws(s):// URL is expected")
        if cannot := refused(settings):
            raise ValueError(f"a caller cannot use {', '.join(cannot)}")
        self.settings, self.clock = settings, clock
        self.transport = wire_of(settings.url)
        self.kind, words = WIRES[self.transport]
        self.label = f"voice bot at {shown(settings.url)} ({words})"
        self.line: Line | None = None
        self.record_to = record
        self._fresh = False

    async def __aenter__(self) -> PhoneCaller:
        line = self.kind(line_url(self.settings.url), self.clock)
        if self.record_to is not None:  # sample 0: the call is placed
            line.recording = CallRecording(self.record_to.open(self.clock.now_ns()))
        try:
            async with asyncio.timeout(self.settings.connect_timeout_s):
                self.line = await line.__aenter__()
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI, ConnectionClosed) as exc:
            if line.recording is not None:  # the call never began: its recording is what it was
                line.recording.close(self.clock.now_ns())
            raise DeviceError(f"{shown(self.settings.url)}: no call ({type(exc).__name__}: {exc})") from None
        self._fresh = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.line is not None:
            try:
                await self.line.__aexit__(*exc)
            finally:
                if self.line.recording is not None:
                    self.line.recording.close(self.clock.now_ns())
                self.line = None

    async def turn(self, ask: Ask, then: Ask | None = None) -> TurnTimeline:
        """Say ``ask``'s clip on the call and hear its answer; the turn's timeline, failures on it (M7).
        ``then`` is not used: this caller never barges in."""
        assert self.line is not None, "turn() outside async with"
        recorder = TurnRecorder(self.clock)
        tl = recorder.timeline
        timing = tl.device = DeviceTiming(transport=self.transport, protocol_version=0, answer_edges=INFERRED)
        timing.temperature = "cold_connection" if self._fresh else "warm"
        self._fresh = False
        tl.vad.speech_end_offset_ms = ask.speech_end_ms
        speech_end_ms = ask.speech_end_ms if ask.speech_end_ms is not None else len(ask.frames) * FRAME_MS
        question = CallQuestion(ask.question_id, at_line_rate(ask, self.line.rate), float(speech_end_ms))
        if self.line.gone is not None:
            recorder.fail(LOST, f"the bot closed the call ({self.line.gone})")
            return recorder.finish()
        wait_s = self.settings.answer_timeout_s or self.settings.turn_timeout_s
        before = Counter(self.line.dropped)
        said = await self.line.ask(question, round(wait_s * 1e9))
        tl.dropped = dict(self.line.dropped - before)  # what the caller dropped of the bot's messages in the turn
        _fill(recorder, said, ask, speech_end_ms, wait_s)
        return recorder.finish()


def at_line_rate(ask: Ask, rate: int) -> np.ndarray:
    """The clip as the line carries it: 16-bit linear at ``rate``."""
    return at_rate(np.frombuffer(b"".join(f.pcm for f in ask.frames), dtype="<i2"), SAMPLE_RATE, rate)


def _fill(recorder: TurnRecorder, said: CallTurn, ask: Ask, speech_end_ms: float, wait_s: float) -> None:
    """The turn's marks from what the call sent and heard; its failure, if any."""
    tl = recorder.timeline
    timing = tl.device
    assert timing is not None
    timing.first_uplink_ns, timing.last_uplink_ns, timing.uplink_frames = (
        said.first_sent_ns,
        said.last_sent_ns,
        said.frames,
    )
    tl.vad.first_frame_ns = said.first_sent_ns
    if said.speech_end_ns is not None:
        tl.vad.user_speech_end_ns = said.speech_end_ns
        if ask.true_end_ms is not None:  # the clip's start was captured speech_end_ms before its end of speech
            tl.vad.true_end_ns = said.speech_end_ns + round((ask.true_end_ms - speech_end_ms) * 1_000_000)
    heard = said.heard
    if heard is not None:
        timing.first_audio_received_ns, timing.last_audio_received_ns = heard.received_first_ns, heard.received_last_ns
        timing.first_audible_ns, timing.downlink_frames = heard.first_ns, heard.chunks
        timing.last_audible_ns = heard.last_end_ns  # the end of its last audible sample
        tl.playback.first_start_ns, tl.playback.last_end_ns = heard.started_ns, timing.last_audible_ns
        tl.playback.audio_ms = heard.played_ns // 1_000_000
    _told(timing, said)
    if said.error:
        recorder.fail(LOST, said.error)
    elif heard is None:
        recorder.fail("no_audio_out", f"nothing audible was played within {wait_s:g} s of the question's end")


def _told(timing: DeviceTiming, said: CallTurn) -> None:
    """What the bot's wire said of itself in the turn, as a xiaozhi server's messages would: its final
    transcriptions (``stt``), its LLM's start, its TTS texts (the sentences); every mark kept as the bot's."""
    timing.bot_marks = list(said.marks)
    heard = [(t, text) for t, kind, text in said.marks if kind == "user-transcription"]
    if heard:
        timing.stt_at = [t for t, _ in heard]
        timing.stt_ns, timing.transcript = heard[-1][0], " ".join(text for _, text in heard)
    timing.llm_ns = next((t for t, kind, _ in said.marks if kind == "bot-llm-started"), None)
    timing.sentence_starts = [(t, text) for t, kind, text in said.marks if kind == "bot-tts-text" and text]
