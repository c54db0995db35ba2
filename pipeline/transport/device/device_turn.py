"""One question on the emulated device: the clip streamed up, the answer received and played, a barge-in.

The device knows only what crosses the wire, so its timeline is built from what it sent and
received: the moment its microphone captured the end of speech (found by running the run's VAD over
the clip beforehand: inside the frame that holds it, captured in the frame's length before its due
time, ``pacer.Capture``), ``stt``, ``llm``, each ``sentence_start``, the first audio frame, the answer's first and
last audible sample once played (``opus.audible``'s threshold, to the sample), ``tts stop``, the last
frame played. It plays audio only between ``tts start`` and ``tts stop`` and as it arrives, and barges
in by the firmware's wake-word or button path. With ``--record-audio`` what it sent and played goes
to its recording (``recording``) at the same moments.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Protocol

import numpy as np

from pipeline.clock import Clock
from pipeline.events import FRAME_MS, SAMPLE_RATE, AudioFrame, AudioOut, Event
from pipeline.run.device_side import Ask, Player, close, drain, frame_holding
from pipeline.run.recorder import TurnRecorder
from pipeline.tracing.timeline import DeviceTiming
from pipeline.transport.device.device_recording import NS_PER_SAMPLE, AudioRecording
from pipeline.transport.device.device_settings import DeviceSettings
from pipeline.transport.device.downlink_guard import bounded
from pipeline.transport.device.link import DeviceLink, why_gone
from pipeline.transport.device.microphone import Microphone
from pipeline.transport.device.pacer import Capture, pacer, send_lateness
from pipeline.transport.device.speaker import DeviceSound
from pipeline.transport.device.uplink_packets import NoiseLoop, clip_packets
from pipeline.transport.wire.failures import ChannelGone
from pipeline.transport.wire.framing import Audio
from pipeline.transport.wire.messages import Abort, Listen, Llm, Malformed, Message, Other, Stt, Tts, kind
from pipeline.transport.wire.opus import AUDIBLE, CodecError, OpusDecoder, audible

_DRAINED = object()  # in the playout queue: everything before it has been played


class TurnHost(Protocol):
    """The device a turn runs on, as the turn needs it."""

    settings: DeviceSettings
    clock: Clock
    link: DeviceLink
    mic: Microphone | None
    noise: NoiseLoop
    sound: DeviceSound | None
    recording: AudioRecording | None

    @property
    def session_id(self) -> str: ...
    @property
    def realtime(self) -> bool: ...

    def listen_message(self, ask: Ask | None) -> Listen: ...

    def barge_in(self, then: Ask, after: asyncio.Event | None, listen: bool) -> None: ...


class DeviceTurn:
    """One question on the device: the clip out, the answer in and played, a barge-in if the user makes one."""

    def __init__(self, device: TurnHost, ask: Ask) -> None:
        self.device, self.ask = device, ask
        self.link, self.settings, self.session_id = device.link, device.settings, device.session_id
        self.clock = device.clock
        self.recorder = TurnRecorder(self.clock)
        self.timing = DeviceTiming(transport=self.link.transport, protocol_version=self.settings.protocol_version)
        self.recorder.timeline.device = self.timing
        self.frames = frames = ask.frames
        self.sending: asyncio.Task[None] | None = None
        # the frame that holds the last speech; no speech found: the clip's last frame
        end = ask.speech_end_ms if ask.speech_end_ms is not None else len(frames) * FRAME_MS
        self.speech_end_ms = end
        self.speech_end_seq = min(frame_holding(end), max(0, len(frames) - 1))
        self.recorder.timeline.vad.speech_end_offset_ms = ask.speech_end_ms  # where the clip's speech ends
        self.heard = asyncio.Event()
        self.sounding = asyncio.Event()  # the answer became audible
        self.drained = asyncio.Event()  # after a wake-word abort: what was buffered has been played
        self.cut = False  # the device left Speaking: audio still arriving is not played
        self.mic_pos = 0  # realtime: the next clip frame the microphone sends
        self.playout: asyncio.Queue[object] = asyncio.Queue()
        # from the question's last frame, how long the server may stay silent: a real server says nothing
        # of an utterance it could not recognise (asr/base.py), so only this tells the device it failed
        self.answer_due: float | None = None
        self.deadline: asyncio.Timeout | None = None

    async def start(self) -> None:
        """Say ``listen start`` and start the microphone (realtime: it runs; it speaks the question now)."""
        self.timing.dropped_frames += self.link.turn_started()
        if self.device.realtime:
            assert self.device.mic is not None
            self.device.mic.ask(self)
            return
        await self.link.send(self.device.listen_message(self.ask))
        self.sending = asyncio.create_task(self.send())

    async def start_speaking(self, after: asyncio.Event | None, listen: bool) -> None:
        """A barge-in: ``listen start`` mid-answer once ``after`` is set, then the question's audio."""
        if after is not None:
            await after.wait()
        try:
            if listen:
                await self.link.send(self.device.listen_message(None if self.device.realtime else self.ask))
        except ChannelGone as exc:
            gone = why_gone(self.link, exc)
            self.recorder.fail(gone.kind, str(gone))
            return
        if self.device.realtime:
            if self.device.mic is not None:
                self.device.mic.ask(self)
            return
        await self.send()

    async def stop(self) -> None:
        if self.sending is not None:
            self.sending.cancel()
            await asyncio.gather(self.sending, return_exceptions=True)
        if self.device.mic is not None:
            self.device.mic.release(self)

    def sent(self, frame: AudioFrame | None, now: int, captured: int) -> None:
        """One uplink frame handed to the transport at ``now``, its capture complete at ``captured`` (its due
        time, ``pacer.Capture``): ``frame`` from the clip, None the noise floor."""
        t = self.timing
        t.uplink_frames += 1
        t.last_uplink_ns = now
        if t.first_uplink_ns is None:
            t.first_uplink_ns = now
            self.recorder.timeline.vad.first_frame_ns = now
        if frame is not None and frame.seq == self.speech_end_seq:
            t.speech_end_frame = frame.seq
            self.recorder.timeline.vad.user_speech_end_ns = _captured_at(frame, captured, self.speech_end_ms)
        true_end = self.ask.true_end_ms
        if frame is not None and true_end is not None and frame.seq == frame_holding(true_end):
            self.recorder.timeline.vad.true_end_ns = _captured_at(frame, captured, true_end)

    async def send(self) -> None:
        """Auto and manual mode's microphone: each frame once its 60 ms are captured; in auto mode the
        noise floor after the clip until the server hears (at most ``tail_ms``); manual: ``listen stop``.
        The packets are pre-encoded (``uplink``: the clip's are what a fresh encoder makes of it), paced by
        the loop's shared pacer; each send's lateness is recorded (``pacer.send_lateness``)."""
        loop = asyncio.get_running_loop()
        paced, late, capture = pacer(), send_lateness(), Capture()
        packets = clip_packets(self.frames, self.settings.encoder_preset)
        due = paced.now_us()
        if self.device.sound is not None:  # its user starts saying it now; the first frame is captured from now
            self.device.sound.question(self.frames)
        tail = self.settings.tail_ms // FRAME_MS if self.settings.listen_mode == "auto" else 0
        for index in range(len(self.frames) + tail):
            if index >= len(self.frames) and self.heard.is_set():
                break
            frame = self.frames[index] if index < len(self.frames) else None
            due += (frame.duration_ms if frame is not None else FRAME_MS) * 1000
            await paced.wait(due)
            packet = packets[index] if frame is not None else self.device.noise.next()
            lateness = paced.late_ms(due)
            late.record(lateness)
            now = self.clock.now_ns()  # handed to the transport now: the server may have it before send_audio returns
            captured = capture.at(now, due, lateness)
            await self.link.send_audio(packet, index * FRAME_MS)
            self.sent(frame, now, captured)
            if self.device.recording is not None:
                pcm = frame.pcm if frame is not None else self.device.noise.last_pcm()
                self.device.recording.microphone(pcm, captured)
        if self.settings.listen_mode == "manual":
            await self.link.send(Listen("stop", session_id=self.session_id))
        if not self.heard.is_set() and self.settings.answer_timeout_s:
            self.answer_due = loop.time() + self.settings.answer_timeout_s
            if self.deadline is not None:
                self.deadline.reschedule(self.answer_due)

    async def receive(self) -> None:
        """The server's messages until ``tts stop``, stamped on arrival. Audio is played only between
        ``tts start`` and ``tts stop`` (application.cc plays it only while Speaking): outside, it is
        dropped and counted; the first ``jitter_frames`` frames of the answer wait for each other."""
        try:
            async with asyncio.timeout(self.answer_due) as self.deadline:
                await self._receive()
        except TimeoutError:
            if self.deadline is None or not self.deadline.expired():
                raise
            wait = self.settings.answer_timeout_s
            self.recorder.fail("empty_transcript", f"the server said nothing within {wait:g} s of the question's end")

    async def _receive(self) -> None:
        decoder = OpusDecoder()
        held: list[AudioOut] | None = [] if self.settings.jitter_frames else None
        sentence, speaking = -1, False
        try:
            while True:
                try:
                    now, item = await self.link.recv_at()
                except ChannelGone as exc:
                    gone = why_gone(self.link, exc)
                    self.recorder.fail(gone.kind, str(gone))
                    raise
                if isinstance(item, Audio):
                    if not speaking:
                        self.timing.dropped_frames += 1
                        continue
                    frame = self._audio(decoder, item.opus, max(sentence, 0), now)
                    if frame is None:
                        continue
                    if held is None:
                        self.playout.put_nowait(frame)
                        continue
                    held.append(frame)
                    if len(held) >= self.settings.jitter_frames:  # enough to start: from now on, as they come
                        for each in held:
                            self.playout.put_nowait(each)
                        held = None
                    continue
                state = self._control(item, now)
                if state == "start":
                    speaking = True
                elif state == "sentence_start":
                    sentence += 1
                elif state == "stop":
                    break
        finally:
            for each in held if held and not self.cut else []:
                self.playout.put_nowait(each)
            close(self.playout)

    def _audio(self, decoder: OpusDecoder, payload: bytes, sentence: int, now: int) -> AudioOut | None:
        """One frame of the answer, counted; decoded unless the device has stopped playing."""
        if self.timing.first_audio_received_ns is None:
            self.timing.first_audio_received_ns = now
        self.timing.last_audio_received_ns = now
        self.timing.downlink_frames += 1
        if self.cut:  # cut off: still arriving, never played
            return None
        try:
            pcm = decoder.decode(payload)
        except CodecError:
            self.timing.undecodable_frames += 1
            return None
        # as long as the PCM it holds (a server may send 20 or 40 ms packets): the player plays it that long
        duration_ms = max(1, len(pcm) * 1000 // (2 * SAMPLE_RATE))
        return AudioOut(sentence_index=sentence, seq=self.timing.downlink_frames, pcm=pcm, duration_ms=duration_ms)

    def _control(self, item: Message | Other | Malformed, now: int) -> str:
        """Stamps what the message says; a ``tts`` message's state, or what it was."""
        if isinstance(item, Stt):
            self.timing.stt_ns = now
            self.timing.stt_at.append(now)
            self.timing.transcript = bounded(item.text)
            self._heard()
        elif isinstance(item, Llm) and self.timing.llm_ns is None:
            self.timing.llm_ns = now
        elif isinstance(item, Tts) and item.state == "start":
            self._heard()
            return "start"
        elif isinstance(item, Tts) and item.state == "sentence_start":
            self.timing.sentence_starts.append((now, bounded(item.text or "")))
            return "sentence_start"
        elif isinstance(item, Tts) and item.state == "stop":
            self.timing.tts_stop_ns = now
            return "stop"
        return "malformed" if isinstance(item, Malformed) else kind(item)  # emotion, alert, ...: tolerated

    def _heard(self) -> None:
        """The server said it heard the question: it has no deadline any more."""
        self.heard.set()
        if self.deadline is not None:
            self.deadline.reschedule(None)

    async def play(self) -> None:
        """The answer played; its first and last audible sample found (the last only for the last frame
        with sound, once the playing is over), and each frame recorded where it played."""
        player, recording = Player(), self.device.recording
        last: tuple[int, bytes] | None = None  # the last frame with sound: its start, its PCM
        anchor: tuple[int, float] | None = None  # the first frame's start on the clock and the player's
        try:
            async for event in self.recorder.wrap("player", player, self._playout()):
                if not isinstance(event, AudioOut):
                    continue
                if anchor is None:  # the player yields a frame once played (``late_s`` after its end)
                    at = self.clock.now_ns() - event.duration_ms * 1_000_000 - round(player.late_s * 1e9)
                    anchor = (at, player.started_s)
                # later frames by the player's own schedule: back to back where it played them so, never
                # a clock reading's jitter apart
                start = anchor[0] + round((player.started_s - anchor[1]) * 1e9)
                if recording is not None:
                    recording.speaker(event.pcm, start)
                if not audible(event.pcm, AUDIBLE):
                    continue
                last = (start, event.pcm)
                if self.timing.first_audible_ns is None:
                    self.timing.first_audible_ns = start + _loud(event.pcm)[0] * NS_PER_SAMPLE
                    self.sounding.set()
        finally:
            if last is not None:
                self.timing.last_audible_ns = last[0] + (_loud(last[1])[-1] + 1) * NS_PER_SAMPLE

    async def _playout(self) -> AsyncIterator[Event]:
        """The frames to play; the player takes the next only once the one before has played."""
        try:
            async for item in drain(self.playout):
                if item is _DRAINED:
                    self.drained.set()
                    continue
                if self.device.sound is not None and isinstance(item, AudioOut):
                    self.device.sound.answer(item)  # the player starts it now (it takes it once free)
                yield item
        finally:
            self.drained.set()

    async def interrupt(self, after_ms: int, then: Ask | None) -> None:
        """Barge-in once the answer has sounded for ``after_ms``, by ``barge_in_with``:

        - wake: ``abort`` with reason ``wake_word_detected``; in auto mode what is buffered plays out
          and ``listen start`` waits until it has (application.cc:811-838, 932-946); in the other modes
          listening starts at once and resets the decoder (StartListeningAudio -> ResetDecoder).
        - button: ``abort`` without reason, the buffer dropped, ``listen start`` at once
          (protocol.cc:58-65, application.cc:790-792).
        - speech: the user speaks the next question: in realtime mode only its audio (the device plays
          on until the server stops the answer); otherwise the device falls silent and says
          ``listen start`` mid-answer.

        Afterwards the device no longer plays what arrives (it has left Speaking). ``then``: the
        question the user goes on with, whose turn starts here; None: no ``listen start``."""
        await self.sounding.wait()
        await asyncio.sleep(max(0, after_ms - FRAME_MS) / 1000)  # it became audible one frame ago
        self.timing.abort_ns = self.clock.now_ns()
        way, mode = self.settings.barge_in_with, self.settings.listen_mode
        if way == "speech":
            if mode != "realtime":
                self.cut = True
                self._drop_buffered()
            if then is not None:
                self.device.barge_in(then, None, listen=mode != "realtime")
            return
        self.cut = True
        play_out = way == "wake" and mode == "auto"
        if play_out:
            self.playout.put_nowait(_DRAINED)
        else:
            self._drop_buffered()
        reason = "wake_word_detected" if way == "wake" else None
        await self.link.send(Abort(session_id=self.session_id, reason=reason))
        if then is not None:
            self.device.barge_in(then, self.drained if play_out else None, listen=True)

    def _drop_buffered(self) -> None:
        """What is buffered is dropped; the frame playing now finishes."""
        waiting = []
        while not self.playout.empty():
            item = self.playout.get_nowait()
            if not isinstance(item, AudioOut):
                waiting.append(item)
        for item in waiting:
            self.playout.put_nowait(item)


def _loud(pcm: bytes) -> np.ndarray:
    """The indices of the frame's samples above the audibility threshold."""
    return np.flatnonzero(np.abs(np.frombuffer(pcm, dtype="<i2").astype(np.int32)) > AUDIBLE)


def check_answered(recorder: TurnRecorder) -> None:
    """A device's turn is complete when the server said what it heard and the answer was played."""
    tl, device = recorder.timeline, recorder.timeline.device
    if not tl.ok or device is None:
        return
    if device.stt_ns is None or not device.transcript.strip():
        recorder.fail("empty_transcript", "the server sent no recognised text (stt)")
    elif tl.playback.last_end_ns is None:
        recorder.fail("no_audio_out", "the server sent no audio")
    elif device.undecodable_frames:
        recorder.fail("bad_audio", f"{device.undecodable_frames} downlink frame(s) could not be decoded")


async def abandon(link: DeviceLink, session_id: str, wait_s: float = 5.0) -> None:
    """A failed turn is aborted on the server too (an abort as the button sends it, without reason),
    and its last messages read, so the next turn starts clean."""
    with contextlib.suppress(ChannelGone, TimeoutError):
        await link.send(Abort(session_id=session_id))
        async with asyncio.timeout(wait_s):
            while True:
                _at, item = await link.recv_at()
                if isinstance(item, Tts) and item.state == "stop":
                    return


def _captured_at(frame: AudioFrame, captured: int, offset_ms: float) -> int:
    """When the microphone captured the audio ``offset_ms`` into the clip, ``frame`` holding it: the frame was
    captured in its length before ``captured``, and that audio lies this far into it."""
    into_ms = min(max(0.0, offset_ms - frame.seq * FRAME_MS), frame.duration_ms)
    return captured - round((frame.duration_ms - into_ms) * 1_000_000)
