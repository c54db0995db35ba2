"""The answer to a wake word that the real server plays from its cache: no ``stt``, no LLM, no turn.

xiaozhi-esp32-server (``helloHandle.py`` checkWakeupWords, with ``enable_wakeup_words_response_cache``
on by default) sends ``tts start``, the reply's ``sentence_start``, its audio paced as any answer's, and
``tts stop``, while reading nothing else from the connection. Its reply is a file made by its TTS
beforehand; the lab's is spoken once by the lab's TTS and kept (``TurnSources.cached_reply``), so no reply
is ever timed with a synthesis in it. It is not a turn: nothing is asked and no row is written.
"""

from __future__ import annotations

import asyncio

from pipeline.events import FRAME_MS
from pipeline.transport.server.channel import ServerChannel
from pipeline.transport.server.pacing import DownlinkPacer, pacing
from pipeline.transport.server.requests import TurnSources
from pipeline.transport.server.server_settings import SessionSettings
from pipeline.transport.wire.messages import Tts
from pipeline.transport.wire.opus import OpusEncoder, encode_off_loop


async def play_cached_reply(
    channel: ServerChannel, turns: TurnSources, settings: SessionSettings, session_id: str, virtual: bool = False
) -> None:
    """Tell the device the cached reply, paced as the real server paces any answer, and end it (``virtual``:
    on a virtual clock, encoded inline)."""
    frames = await turns.cached_reply(settings.wake_reply, session_id)
    loop = asyncio.get_running_loop()
    encoder = OpusEncoder(preset=settings.downlink_codec)
    pacer = DownlinkPacer(pacing(settings.pacing), time=loop.time, sleep=asyncio.sleep)
    await channel.send(Tts("start", session_id=session_id))
    await channel.send(Tts("sentence_start", session_id=session_id, text=settings.wake_reply))
    for index, pcm in enumerate(frames):
        await pacer.before_frame()
        packet = await encode_off_loop(encoder, pcm, inline=virtual)
        await channel.send_audio(packet, timestamp_ms=index * FRAME_MS)
        pacer.sent()
    await pacer.before_stop()
    await channel.send(Tts("stop", session_id=session_id))
