"""A run's device on a telephony line: each question said on a call to a bot that speaks Twilio Media Streams
(``twilio_call``), its turn a device's timeline as a xiaozhi device's is, with the answer's edges inferred.

``pipeline.replay --server twilio+ws://HOST/PATH`` (or ``twilio+wss://``) runs its devices as these: a device
is one call, held for all its questions, as a xiaozhi device holds one connection. The clip (16 kHz) is said at
8 kHz, as a phone line carries it. The turn's marks are the device's, where they exist on this wire: the user's
end of speech where the line carried it, the first and last media of the answer received, its first and last
audible sample as the phone's playout buffer plays them. What a xiaozhi server tells (``stt``, ``llm``,
``tts start`` / ``stop``, each sentence) Twilio's wire does not carry: those marks stay empty, and the answer's
edges are found from the sound (``phone_playout``), so every turn says ``answer_edges = inferred``.

What this wire has no part for is refused when the device is made, not ignored: a barge-in, manual listening, the
Opus encoder and jitter buffer, a link profile, the settle wait, sound devices and recordings. Auto and realtime
listening are the same here: the line carries the caller's audio, silence or speech, for the whole call.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import soxr
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from pipeline.clock import Clock
from pipeline.events import FRAME_MS, SAMPLE_RATE
from pipeline.run.device_side import Ask
from pipeline.run.recorder import TurnRecorder
from pipeline.tracing.timeline import DeviceTiming, TurnTimeline
from pipeline.transport.device.device_settings import DeviceSettings
from pipeline.transport.device.link import LOST, DeviceError
from pipeline.transport.device.phone_playout import NS_PER_SAMPLE
from pipeline.transport.device.twilio_call import CallQuestion, CallTurn, PhoneLine
from pipeline.transport.wire import g711

SCHEMES = {"twilio+ws": "ws", "twilio+wss": "wss"}
TRANSPORT = "twilio"
INFERRED = "inferred"  # the answer's edges found from its sound (``DeviceTiming.answer_edges``)
UNUSED = {  # a setting this wire has no part for, and what the device would do with it
    "barge_in_after_ms": "a barge-in",
    "jitter_frames": "a jitter buffer",
    "profile": "a link profile",
    "settle_ms": "a settle wait",
}


def is_phone(url: str) -> bool:
    """Whether ``url`` names a bot on Twilio's wire."""
    return urlsplit(url).scheme in SCHEMES


def line_url(url: str) -> str:
    """The WebSocket URL a ``twilio+ws(s)://`` URL names."""
    parts = urlsplit(url)
    return urlunsplit((SCHEMES[parts.scheme], parts.netloc, parts.path, parts.query, ""))


def shown(url: str) -> str:
    """``url`` as a label or an error may show it: no user, password, query or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def refused(settings: DeviceSettings) -> list[str]:
    """What of ``settings`` a telephony caller cannot do, each said; empty when nothing is."""
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
    """One device on a telephony line: ``async with`` places the call, ``turn`` asks one question on it."""

    def __init__(self, settings: DeviceSettings, clock: Clock) -> None:
        if not is_phone(settings.url):
            raise ValueError(f"{settings.url!r}: a twilio+ws:// or twilio+wss:// URL is expected")
        if cannot := refused(settings):
            raise ValueError(f"a telephony caller cannot use {', '.join(cannot)}")
        self.settings, self.clock = settings, clock
        self.label = f"telephony bot at {shown(settings.url)} (Twilio Media Streams, mu-law 8 kHz)"
        self.line: PhoneLine | None = None
        self._fresh = False

    async def __aenter__(self) -> PhoneCaller:
        line = PhoneLine(line_url(self.settings.url), self.clock)
        try:
            async with asyncio.timeout(self.settings.connect_timeout_s):
                self.line = await line.__aenter__()
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI, ConnectionClosed) as exc:
            raise DeviceError(f"{shown(self.settings.url)}: no call ({type(exc).__name__}: {exc})") from None
        self._fresh = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.line is not None:
            await self.line.__aexit__(*exc)
            self.line = None

    @property
    def dropped(self) -> dict[str, int]:
        """What the caller dropped of the bot's messages, by why, over the whole call."""
        return dict(self.line.dropped) if self.line is not None else {}

    async def turn(self, ask: Ask, then: Ask | None = None) -> TurnTimeline:
        """Say ``ask``'s clip on the call and hear its answer; the turn's timeline, failures on it (M7).
        ``then`` is not used: this caller never barges in."""
        assert self.line is not None, "turn() outside async with"
        recorder = TurnRecorder(self.clock)
        tl = recorder.timeline
        timing = tl.device = DeviceTiming(transport=TRANSPORT, protocol_version=0, answer_edges=INFERRED)
        timing.temperature = "cold_connection" if self._fresh else "warm"
        self._fresh = False
        tl.vad.speech_end_offset_ms = ask.speech_end_ms
        speech_end_ms = ask.speech_end_ms if ask.speech_end_ms is not None else len(ask.frames) * FRAME_MS
        question = CallQuestion(ask.question_id, at_line_rate(ask), float(speech_end_ms))
        if self.line.gone is not None:
            recorder.fail(LOST, f"the bot closed the call ({self.line.gone})")
            return recorder.finish()
        wait_ns = round((self.settings.answer_timeout_s or self.settings.turn_timeout_s) * 1e9)
        said = await self.line.ask(question, wait_ns)
        _fill(recorder, said, ask, speech_end_ms, self.settings.answer_timeout_s or self.settings.turn_timeout_s)
        return recorder.finish()


def at_line_rate(ask: Ask) -> np.ndarray:
    """The clip as the phone line carries it: 16-bit linear at 8 kHz."""
    pcm = np.frombuffer(b"".join(f.pcm for f in ask.frames), dtype="<i2")
    down = np.asarray(soxr.resample(pcm.astype(np.float32), SAMPLE_RATE, g711.SAMPLE_RATE), dtype=np.float32)
    line: np.ndarray = np.clip(np.rint(down), -32768, 32767).astype(np.int16)
    return line


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
        timing.last_audible_ns = heard.last_ns + NS_PER_SAMPLE  # the end of its last audible sample
        tl.playback.first_start_ns, tl.playback.last_end_ns = heard.started_ns, timing.last_audible_ns
        tl.playback.audio_ms = heard.played_ns // 1_000_000
    if said.error:
        recorder.fail(LOST, said.error)
    elif heard is None:
        recorder.fail("no_audio_out", f"nothing audible was played within {wait_s:g} s of the question's end")
