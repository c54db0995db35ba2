"""espeak-ng TTS: robotic but real, local, and fast to its first frame (docs/reference/stack.md: ~20 ms).

Chinese is converted to tone-numbered pinyin (pypinyin) and read by the
``cmn-latn-pinyin`` voice, because Debian's ``-v cmn`` reads pinyin with English
rules. Audio is streamed from espeak's stdout and framed as it arrives.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import IO

import numpy as np

from pipeline.events import AudioOut, Event, Sentence, StageInfo
from stages.registry import Implementation, TurnInputs, require_positive
from stages.threads import from_thread
from stages.tts.frames import frames_of

_CJK = re.compile(r"[\u3400-\u9fff]")
WAV_HEADER = 44
ESPEAK_RATE = 22050
VOICES = {"zh": "cmn-latn-pinyin", "en": "en-us"}


def espeak_binary() -> str:
    """The espeak-ng program; a ``ValueError`` that says how to install it when there is none."""
    path = shutil.which("espeak-ng")
    if path is None:
        raise ValueError("espeak-ng is not installed (Debian: apt-get install espeak-ng)")
    return path


def voice_and_text(text: str) -> tuple[str, str]:
    """The voice for ``text`` and what it reads: English as written, Chinese as tone-numbered pinyin."""
    if not _CJK.search(text):
        return VOICES["en"], text
    from pypinyin import Style, lazy_pinyin

    syllables = lazy_pinyin(text, style=Style.TONE3, neutral_tone_with_five=True)
    return VOICES["zh"], " ".join(syllables)


class EspeakTts:
    """The TTS stage that has espeak-ng speak each sentence and passes its audio on in 60 ms frames as it comes."""

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
        # the text goes on stdin: as an argument, a sentence starting with "-" would be read as options
        command = [self.binary, "-v", voice, "-s", str(self.words_per_minute), "--stdout", "--stdin"]
        body = _skip_header(_stream_stdout(command, text.encode("utf-8")))
        samples = (np.frombuffer(data, dtype="<i2") async for data in body)
        async for frame in frames_of(samples, ESPEAK_RATE, sentence.index):
            yield frame


class EspeakError(RuntimeError):
    """espeak-ng failed: its exit status and what it said on stderr."""


async def _stream_stdout(command: list[str], stdin: bytes) -> AsyncIterator[bytes]:
    """A child's stdout, chunk by chunk as it is written; a failing child raises ``EspeakError``.

    Read by a plain ``subprocess`` in a worker thread rather than asyncio's
    subprocess support, whose child watcher logs spurious "unknown child" warnings
    here when native libraries run in other threads.
    """
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    errors: list[bytes] = []
    completed = False

    def pump() -> Iterator[bytes]:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        _hand_over(proc.stdin, stdin)
        while chunk := proc.stdout.read(4096):
            yield chunk
        errors.append(proc.stderr.read())

    def stop() -> None:
        if proc.poll() is None and not completed:  # left early: the child must not keep the thread reading
            proc.kill()

    try:
        async with from_thread(None, pump, stop=stop) as chunks:
            async for chunk in chunks:
                yield chunk
            completed = True
    finally:
        code = proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    if code != 0:
        said = b"".join(errors).decode("utf-8", "replace").strip()
        raise EspeakError(f"espeak-ng exited with status {code}" + (f": {said[:200]}" if said else ""))


def _hand_over(pipe: IO[bytes], data: bytes) -> None:
    """Write a child's whole stdin; a child that quit before reading it is judged by its exit status."""
    try:
        pipe.write(data)
        pipe.close()
    except BrokenPipeError:
        # the child is gone: its status and stderr, read next, say why, not the broken pipe
        with contextlib.suppress(BrokenPipeError):
            pipe.close()


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
    """The ``[tts]`` keys of ``impl = "espeak"``: how fast it speaks."""

    words_per_minute: int = 160

    def __post_init__(self) -> None:
        require_positive("tts", words_per_minute=self.words_per_minute)


def _build(s: EspeakSettings, _engine: None, _turn: TurnInputs) -> EspeakTts:
    return EspeakTts(s.words_per_minute)


IMPLEMENTATION = Implementation("tts", "espeak", EspeakSettings, _build, languages=tuple(VOICES))
