"""espeak-ng TTS: robotic but real, local, and fast to its first frame (STACK.md: ~20 ms).

Chinese is converted to tone-numbered pinyin (pypinyin) and read by the
``cmn-latn-pinyin`` voice, because Debian's ``-v cmn`` reads pinyin with English
rules. Audio is streamed from espeak's stdout and framed as it arrives.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from pipeline.events import AudioOut, Event, Sentence, StageInfo
from stages.registry import Implementation, TurnInputs
from stages.tts.frames import Framer, StreamResampler

_CJK = re.compile(r"[\u3400-\u9fff]")
WAV_HEADER = 44
ESPEAK_RATE = 22050
VOICES = {"zh": "cmn-latn-pinyin", "en": "en-us"}


def espeak_binary() -> str:
    path = shutil.which("espeak-ng")
    if path is None:
        raise ValueError("espeak-ng is not installed (Debian: apt-get install espeak-ng)")
    return path


def voice_and_text(text: str) -> tuple[str, str]:
    if not _CJK.search(text):
        return VOICES["en"], text
    from pypinyin import Style, lazy_pinyin

    syllables = lazy_pinyin(text, style=Style.TONE3, neutral_tone_with_five=True)
    return VOICES["zh"], " ".join(syllables)


class EspeakTts:
    def __init__(self, words_per_minute: int = 160) -> None:
        self.binary = espeak_binary()
        self.words_per_minute = words_per_minute
        self.info = StageInfo(role="tts", impl="espeak-ng", attributes=(("tts.wpm", words_per_minute),))

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for event in events:
            if isinstance(event, Sentence):
                async for frame in self._speak(event):
                    yield frame

    async def _speak(self, sentence: Sentence) -> AsyncIterator[AudioOut]:
        voice, text = voice_and_text(sentence.text)
        command = [self.binary, "-v", voice, "-s", str(self.words_per_minute), "--stdout", text]
        resampler, framer, seq = StreamResampler(ESPEAK_RATE), Framer(), 0
        body = _skip_header(_stream_stdout(command))
        async for data in body:
            for pcm in framer.feed(resampler.feed(np.frombuffer(data, dtype="<i2"))):
                yield AudioOut(sentence_index=sentence.index, seq=seq, pcm=pcm)
                seq += 1
        for pcm in framer.flush():
            yield AudioOut(sentence_index=sentence.index, seq=seq, pcm=pcm)


async def _stream_stdout(command: list[str]) -> AsyncIterator[bytes]:
    """A child's stdout, chunk by chunk as it is written.

    Read by a plain ``subprocess`` in a worker thread rather than asyncio's
    subprocess support, whose child watcher logs spurious "unknown child" warnings
    here when native libraries run in other threads.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)

    def pump() -> None:
        assert proc.stdout is not None
        try:
            while chunk := proc.stdout.read(4096):
                loop.call_soon_threadsafe(queue.put_nowait, chunk)
            loop.call_soon_threadsafe(queue.put_nowait, None)
        except BaseException as exc:  # handed to the event loop
            loop.call_soon_threadsafe(queue.put_nowait, exc)

    reader = loop.run_in_executor(None, pump)
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        if proc.poll() is None:
            proc.kill()
        await asyncio.shield(reader)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


async def _skip_header(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The PCM body of a streamed WAV: header dropped, whole 16-bit samples only."""
    header, tail = b"", b""
    async for chunk in chunks:
        if len(header) < WAV_HEADER:
            need = WAV_HEADER - len(header)
            header, chunk = header + chunk[:need], chunk[need:]
        data = tail + chunk
        usable = len(data) - len(data) % 2
        tail = data[usable:]
        if usable:
            yield data[:usable]


@dataclass(frozen=True, slots=True)
class EspeakSettings:
    words_per_minute: int = 160


def _build(s: EspeakSettings, _engine: None, _turn: TurnInputs) -> EspeakTts:
    return EspeakTts(s.words_per_minute)


IMPLEMENTATION = Implementation("tts", "espeak", EspeakSettings, _build, languages=tuple(VOICES))
