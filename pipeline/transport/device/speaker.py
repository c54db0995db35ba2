"""The emulated device heard in a room: its speaker, and its user's voice, played into sound devices.

``--speaker OUTPUT`` plays each answer frame into a PortAudio output as the device's player
starts it; ``--voice OUTPUT`` plays each question as its user says it: the whole clip from the
moment its first frame begins to be captured, at the pace the microphone captures it. A
microphone in that room (or a sink's monitor) then hears what a person beside the device hears,
question and answer, on one clock: the silence between them can be measured from sound alone.
Both on one output share one stream, so their distance is kept (to the stream clock's millisecond)
whatever the sound server's own latency (``pipeline.acoustic.sound``: lanes scheduled at a stream time).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pipeline.events import AudioFrame, AudioOut
from pipeline.transport.device.device_settings import SoundOutputs
from pipeline.transport.device.link import DeviceError

if TYPE_CHECKING:  # PortAudio is loaded only when a device is given a sound output
    from pipeline.acoustic.sound import Lane, Speaker


class DeviceSound:
    """The open outputs of one device; ``close`` stops them."""

    def __init__(self, outputs: SoundOutputs, label: str) -> None:
        from pipeline.acoustic.sound import SoundError, Speaker

        self.streams: dict[str, Speaker] = {}
        try:
            for name in sorted({outputs.speaker, outputs.voice} - {""}):
                self.streams[name] = Speaker(name).start()
        except SoundError as exc:
            self.close()
            raise DeviceError(f"{label}: {exc}") from exc
        self.answer_lane: Lane | None = self._lane(outputs.speaker, f"{label} speaker")
        self.voice_lane: Lane | None = self._lane(outputs.voice, f"{label} voice")

    def _lane(self, name: str, label: str) -> Lane | None:
        return self.streams[name].lane(label) if name else None

    def question(self, frames: Sequence[AudioFrame]) -> None:
        """The user starts saying the question now: the clip plays from now on, frame after frame."""
        if self.voice_lane is not None:
            from pipeline.acoustic.sound import pcm16

            self.voice_lane.write(pcm16(b"".join(f.pcm for f in frames)))

    def answer(self, frame: AudioOut) -> None:
        """The player starts this frame now."""
        if self.answer_lane is not None:
            from pipeline.acoustic.sound import pcm16

            self.answer_lane.write(pcm16(frame.pcm))

    @property
    def late(self) -> int:
        """Chunks that were written after their time had been played past (their sound is late)."""
        return sum(s.late for s in self.streams.values())

    def close(self) -> None:
        for stream in self.streams.values():
            stream.close()
        self.streams = {}
