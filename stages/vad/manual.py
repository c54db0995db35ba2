"""Push-to-talk: the end-pointer for ``listen`` mode "manual", where the user, not a VAD, ends the utterance.

The real server switches VAD off in manual mode (xiaozhi-server ``core/providers/vad/silero.py:55-58``:
``is_vad`` returns True for every frame), keeps every frame (``core/providers/asr/base.py:62-64``)
and recognises only on ``listen stop`` (``core/handle/textHandler/listenMessageHandler.py:38-54``).
Here ``listen stop`` closes the uplink, so the utterance ends where the input ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from pipeline.events import AudioFrame, Event, SpeechEnd, SpeechStart, StageInfo


class ManualEndpoint:
    """Every frame is speech: ``SpeechStart(0)`` with the first frame, every frame passed on, and
    ``SpeechEnd`` at the end of the input with the total audio time (none when no frame came)."""

    def __init__(self) -> None:
        self.info = StageInfo(role="vad", impl="manual", attributes=(("vad.profile", "manual"),))

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        total_ms = 0
        started = False
        async for event in events:
            if not isinstance(event, AudioFrame):
                continue
            if not started:
                started = True
                yield SpeechStart(offset_ms=0)
            yield event
            total_ms += event.duration_ms
        if started:
            yield SpeechEnd(offset_ms=total_ms)
