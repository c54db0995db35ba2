"""A call to a Pipecat bot on Pipecat's own wire (``phone_line``'s line on ``wire.pipecat_frames``).

The caller speaks as Pipecat's own WebSocket clients do: RTVI's ``client-ready`` once connected, then a protobuf
``Frame`` of 16-bit PCM at 16 kHz every 20 ms for as long as the call lasts. The bot's audio frames (at their own
rate) go into the playout buffer, an ``interruption`` frame clears it, and its RTVI messages are the bot's own
marks of the turn (``CallTurn.marks``): when it heard the user start and stop, what it transcribed, when its LLM
and TTS started, when it started and stopped speaking, each stamped on arrival. The answer's audible edges are
still found from its sound, as on every line: the marks are what the bot believed, kept beside what was heard.
"""

from __future__ import annotations

import secrets

import numpy as np

from pipeline.transport.device.phone_line import Line, Message
from pipeline.transport.wire import pipecat_frames as pf
from pipeline.transport.wire.messages import Malformed

RATE = 16000  # the caller's audio: what Pipecat's clients send and its pipelines take by default
QUIET_KINDS = ("user-audio-level", "bot-audio-level", "metrics")  # many a second, no mark of a turn
TEXT_KINDS = ("user-transcription", "bot-tts-text", "bot-output", "bot-transcription")


def mark_of(event: pf.RtviEvent) -> tuple[str, str] | None:
    """An RTVI message as a turn's mark: its type and the text it carries ("" for most); None for the messages
    that mark nothing (audio levels, metrics) and for a transcription not yet final."""
    if event.kind in QUIET_KINDS:
        return None
    if event.kind == "user-transcription" and event.data.get("final") is False:
        return None
    text = event.data.get("text")
    return event.kind, text if event.kind in TEXT_KINDS and isinstance(text, str) else ""


class PipecatLine(Line):
    """A call on Pipecat's protobuf wire."""

    rate = RATE
    max_size = pf.MOST_BYTES + 1024

    def opening(self) -> list[Message]:
        about = {"version": "1.0.0", "about": {"library": "voice-latency-lab"}}
        return [pf.message("client-ready", about, secrets.token_hex(8))]

    def frame(self, pcm: np.ndarray, index: int) -> Message:
        return pf.audio(np.asarray(pcm, dtype="<i2").tobytes(), RATE)

    def heard(self, data: Message, at_ns: int) -> list[Message]:
        item = pf.read(data)
        if isinstance(item, Malformed):
            self.dropped[item.what] += 1
        elif isinstance(item, pf.BotAudio):
            self.play(at_ns, item.pcm, item.rate)
        elif isinstance(item, pf.Interruption):
            self.playout.clear(at_ns)
            self.marks.add(at_ns, "interruption", self.dropped)
        elif isinstance(item, pf.RtviEvent) and (mark := mark_of(item)) is not None:
            self.marks.add(at_ns, mark[0], self.dropped, mark[1])
        return []
