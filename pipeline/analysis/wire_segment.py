"""The network + decode segment of a device's turn, where both ends' spans are at hand (joined traces).

A device alone cannot tell the wire from the server: it sees only when its microphone captured the
end of the user's speech and when the first audible sample played. Our server's turn span is a child of
the device's turn span (the ``traceparent`` in ``listen``), so with both trace files read
together the device's first sound splits into four consecutive parts that sum to
``first_audible_ms``:

- ``uplink_ms``: the device's microphone captured the end of speech -> the frame holding it reached
  the server (the rest of that frame's capture, the send, the wire);
- ``server_first_audio_ms``: -> the server sent the first audio frame (its VAD, ASR, LLM, TTS);
- ``downlink_ms``: -> the device received that frame;
- ``device_buffer_ms``: -> the first audible sample played (decode, jitter buffer, and any silence
  before the speech: whole silent frames and the first sounding frame's leading samples).

Across machines the first and third need the two clocks in step (NTP or PTP); on one machine
they share one clock. Without the server's spans these columns stay empty, never estimated.
"""

from __future__ import annotations

from pipeline.analysis.numbers import ms
from pipeline.analysis.traces import ReadSpan
from pipeline.analysis.turns import TurnSpans
from pipeline.tracing import names

Split = tuple[float | None, float | None, float | None, float | None]  # columns.WIRE_COLUMNS, in order
Stamps = tuple[int | None, int | None]


def buffered(device: ReadSpan) -> Stamps:
    """When the device received the first audio frame and when its first sound began (ns): the device's
    buffer, wherever it is measured (a row's ``device_buffer_ms``, a real server's segments, the critical
    path's ``device_buffer``); either is None where the device's span lacks its event."""
    return device.event_ns(names.EV_FIRST_AUDIO_RECEIVED), device.event_ns(names.EV_FIRST_AUDIBLE)


def device_buffer_ms(device: ReadSpan) -> float | None:
    """The device's buffer (``buffered``) in ms."""
    return ms(*buffered(device))


def wire_split(device_turn: ReadSpan, device: ReadSpan | None, server: TurnSpans | None) -> Split:
    """The four parts of a device's first sound (``WIRE_COLUMNS``, in order): ``device``, the device turn's
    ``device`` span; ``server``, its server's turn (``turns.servers_of``). All None unless both ends' spans
    are given."""
    downlink = server.first(names.DOWNLINK) if server is not None else None
    if device is None or server is None or downlink is None:
        return _NO_SPLIT
    sent = device_turn.event_ns(names.EV_USER_SPEECH_END)
    arrived = server.turn.event_ns(names.EV_USER_SPEECH_END)
    first_sent = downlink.start_ns  # the server's ``downlink`` span: first frame out
    received = device.event_ns(names.EV_FIRST_AUDIO_RECEIVED)
    return ms(sent, arrived), ms(arrived, first_sent), ms(first_sent, received), device_buffer_ms(device)


_NO_SPLIT: Split = (None, None, None, None)
