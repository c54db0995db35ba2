"""The network + decode segment of a device's turn, where both ends' spans are at hand (joined traces).

A device alone cannot tell the wire from the server: it sees only when it sent the frame that
ended the user's speech and when the first sound played. Our server's turn span is a child of
the device's turn span (the ``traceparent`` in ``listen``), so with both trace files read
together the device's first sound splits into four consecutive parts that sum to
``first_audible_ms``:

- ``uplink_ms``: the device sent the speech-end frame -> it reached the server;
- ``server_first_audio_ms``: -> the server sent the first audio frame (its VAD, ASR, LLM, TTS);
- ``downlink_ms``: -> the device received that frame;
- ``device_buffer_ms``: -> the first frame with sound in it began to play (decode, jitter buffer,
  and any silent frames before the speech).

Across machines the first and third need the two clocks in step (NTP or PTP); on one machine
they share one clock. Without the server's spans these columns stay empty, never estimated.
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline.analysis.traces import SpanRecord
from pipeline.tracing import names

Ms = Callable[[int | None, int | None], float | None]
Split = tuple[float | None, float | None, float | None, float | None]  # columns.WIRE_COLUMNS, in order


def wire_split(
    device_turn: SpanRecord,
    device: SpanRecord | None,
    server_turn: SpanRecord | None,
    server_downlink: SpanRecord | None,
    ms: Ms,
) -> Split:
    """The four parts of a device's first sound (``WIRE_COLUMNS``, in order); all None unless both
    ends' spans are given."""
    if device is None or server_turn is None or server_downlink is None:
        return _NO_SPLIT
    sent = device_turn.event_ns(names.EV_USER_SPEECH_END)
    arrived = server_turn.event_ns(names.EV_USER_SPEECH_END)
    first_sent = server_downlink.start_ns  # the server's ``downlink`` span: first frame out
    received = device.event_ns(names.EV_FIRST_AUDIO_RECEIVED)
    audible = device.event_ns(names.EV_FIRST_AUDIBLE)
    return ms(sent, arrived), ms(arrived, first_sent), ms(first_sent, received), ms(received, audible)


_NO_SPLIT: Split = (None, None, None, None)
