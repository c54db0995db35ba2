"""When the server sends each downlink audio frame of a turn, and its ``tts stop``: named pacings.

A server cannot send an answer's audio as fast as it is made: a device plays it in real
time and holds only so much (the firmware keeps at most 40 packets, then drops them). How a
server paces it sets how far ahead of the device's playout it runs, so the device's buffer,
its underruns and what a barge-in has to drain. The pacer holds no clock: the caller gives it
``time`` (seconds) and ``sleep``, so it runs on the virtual clock in tests.

- ``xiaozhi-server``: xiaozhi-esp32-server's downlink (core/handle/sendAudioHandle.py:18,
  246-255, and core/utils/audioRateController.py:46-63, 112-151). The first 5 frames of a turn
  go out as soon as they are made; the first frame after them starts the rate controller's
  clock and also goes at once; then one frame per 60 ms of that clock. When the frames ran out
  for a frame's time or more (a slow sentence, a tool call), the clock restarts where the next
  frame arrives: no catch-up burst. ``tts stop`` waits until the last frame has left, then
  (5 + 2) x 60 ms for the device to play what it holds (sendAudioHandle.py:58-76, 279-312).
- ``lab-v1``: this lab before issue 23. The first 3 frames at once, then frame k due 60 ms x
  (k - 2) after the turn's first frame, on one clock per turn: after a stall every late frame
  goes out at once until the schedule is caught up. ``tts stop`` right after the last frame.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pipeline.events import FRAME_MS


@dataclass(frozen=True, slots=True)
class Pacing:
    """A downlink pacing; every field is part of what a run measures."""

    name: str
    follows: str  # the implementation and the source it is read from
    prebuffer_frames: int  # a turn's first frames, sent as soon as they are made
    # True: the real server's rate controller (its clock starts at the first frame after the
    # prebuffer, which goes at once, and restarts after the outbox ran empty for a frame's time).
    # False: one clock per turn from its first frame, the first paced frame due a frame after it.
    reanchor: bool
    stop_allowance_frames: int  # after the last frame left, frames' time before ``tts stop``


PACINGS: dict[str, Pacing] = {
    p.name: p
    for p in (
        Pacing(
            "xiaozhi-server",
            "xiaozhi-esp32-server core/handle/sendAudioHandle.py, core/utils/audioRateController.py",
            prebuffer_frames=5,
            reanchor=True,
            stop_allowance_frames=5 + 2,  # its prebuffer plus 2 frames of network jitter
        ),
        Pacing("lab-v1", "this lab before issue 23", prebuffer_frames=3, reanchor=False, stop_allowance_frames=0),
    )
}


def pacing(name: str) -> Pacing:
    """The named pacing; a ValueError that lists the known ones otherwise."""
    try:
        return PACINGS[name]
    except KeyError:
        raise ValueError(f"unknown downlink pacing {name!r}; known: {', '.join(PACINGS)}") from None


class DownlinkPacer:
    """One turn's downlink schedule. Per frame: ``await before_frame()``, send it, ``sent()``; then ``before_stop``.

    Use one pacer per turn, from the one task that sends the turn's audio, in that order.
    """

    def __init__(
        self,
        settings: Pacing,
        time: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
        frame_s: float = FRAME_MS / 1000,
    ) -> None:
        self.settings, self._time, self._sleep = settings, time, sleep
        # whole microseconds: a due time computed in float seconds can land a hair after "now" and wait for nothing
        self._frame_us = round(frame_s * 1e6)
        self.frames = 0  # frames let through by before_frame
        self._anchor: int | None = None  # when the pacing clock read zero (us)
        self._position = 0  # paced frames on that clock so far
        self._last_sent: int | None = None

    async def before_frame(self) -> None:
        """Call as soon as the next frame is available (taken from the outbox); returns when it is due.

        The time of this call is when the frame became available: a stall is told by how long
        after the previous frame left it came. Returns at once for a prebuffer frame and for a
        late one; a paced frame always passes through ``sleep`` (for 0 s when it is already due).
        """
        now = self._now_us()
        index = self.frames
        self.frames += 1
        due = self._due_reanchored(index, now) if self.settings.reanchor else self._due_per_turn(index, now)
        if due is not None:
            await self._sleep(max(0, due - now) / 1e6)

    def sent(self) -> None:
        """Call once the frame was handed to the transport."""
        self._last_sent = self._now_us()

    async def before_stop(self) -> None:
        """Call after the turn's last frame was sent, before ``tts stop``; returns when the stop may go.

        That is the stop allowance after the later of the last ``sent()`` and now, as the real
        server waits even when the turn sent no audio; at once for an allowance of 0.
        """
        allowance = self.settings.stop_allowance_frames * self._frame_us
        if allowance <= 0:
            return
        now = self._now_us()
        start = now if self._last_sent is None else max(now, self._last_sent)
        await self._sleep((start + allowance - now) / 1e6)

    def _now_us(self) -> int:
        return round(self._time() * 1e6)

    def _due_per_turn(self, index: int, now: int) -> int | None:
        if index == 0:
            self._anchor = now
        if index < self.settings.prebuffer_frames or self._anchor is None:
            return None
        return self._anchor + (index - self.settings.prebuffer_frames + 1) * self._frame_us

    def _due_reanchored(self, index: int, now: int) -> int | None:
        if index < self.settings.prebuffer_frames:
            return None
        if self._anchor is None:
            self._anchor = now
        elif self._last_sent is not None and now - self._last_sent >= self._frame_us:
            # the outbox ran empty for a frame or more: this frame plays now, the clock goes on from it
            self._anchor = now - self._position * self._frame_us
        due = self._anchor + self._position * self._frame_us
        self._position += 1
        return due
