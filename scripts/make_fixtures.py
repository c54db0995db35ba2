"""Regenerates audio_fixtures/: spoken questions made with offline TTS, plus edge cases.

Chinese is spoken by espeak-ng's ``cmn-latn-pinyin`` voice from the pinyin given
here (Debian's ``-v cmn`` reads pinyin with English rules); English by espeak-ng
``en-us``. Each clip is 16 kHz mono 16-bit WAV with silence before and after.
Add a question by adding a line to QUESTIONS and running
``python scripts/make_fixtures.py``.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import tempfile
import wave
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.fixtures import load_audio  # noqa: E402

OUT = ROOT / "audio_fixtures"
RATE = 16000
LEAD_S, TAIL_S = 0.5, 1.2

# id, language, category, text, what the voice reads (pinyin for Chinese), scripted answer, tool
QUESTIONS: list[tuple[str, str, str, str, str, str, str]] = [
    (
        "zh01",
        "zh",
        "device_control",
        "打开客厅的灯。",
        "da3 kai1 ke4 ting1 de5 deng1.",
        "好的，客厅的灯已经打开了。",
        "set_light",
    ),
    (
        "zh02",
        "zh",
        "device_control",
        "把音量调小一点。",
        "ba3 yin1 liang4 tiao2 xiao3 yi4 dian3.",
        "好的，音量已经调小了。",
        "set_volume",
    ),
    ("zh03", "zh", "time_weather", "现在几点了？", "xian4 zai4 ji3 dian3 le5?", "现在是下午三点，别忘了喝水。", ""),
    (
        "zh04",
        "zh",
        "time_weather",
        "明天会下雨吗？",
        "ming2 tian1 hui4 xia4 yu3 ma5?",
        "明天可能有小雨，出门记得带伞。",
        "",
    ),
    (
        "zh05",
        "zh",
        "knowledge",
        "长城有多长？",
        "chang2 cheng2 you3 duo1 chang2?",
        "长城全长约两万一千公里，是世界上最长的城墙。",
        "",
    ),
    (
        "zh06",
        "zh",
        "knowledge",
        "水的沸点是多少度？",
        "shui3 de5 fei4 dian3 shi4 duo1 shao3 du4?",
        "在标准大气压下，水的沸点是一百摄氏度。",
        "",
    ),
    (
        "zh07",
        "zh",
        "knowledge",
        "月亮为什么会发光？",
        "yue4 liang4 wei4 shen2 me5 hui4 fa1 guang1?",
        "月亮自己不发光，它反射的是太阳的光。",
        "",
    ),
    (
        "zh08",
        "zh",
        "knowledge",
        "熊猫喜欢吃什么？",
        "xiong2 mao1 xi3 huan1 chi1 shen2 me5?",
        "熊猫最喜欢吃竹子，每天要吃很多。",
        "",
    ),
    (
        "zh09",
        "zh",
        "chitchat",
        "给我讲个笑话吧。",
        "gei3 wo3 jiang3 ge4 xiao4 hua4 ba5.",
        "好呀。小明问妈妈，为什么蚊子总咬我？妈妈说，因为你最甜。",
        "",
    ),
    ("zh10", "zh", "chitchat", "你叫什么名字？", "ni3 jiao4 shen2 me5 ming2 zi5?", "我叫小智，是你的语音助手。", ""),
    (
        "zh11",
        "zh",
        "chitchat",
        "我今天有点累。",
        "wo3 jin1 tian1 you3 dian3 lei4.",
        "辛苦了，早点休息吧。需要我放点轻音乐吗？",
        "",
    ),
    (
        "zh12",
        "zh",
        "knowledge",
        "一年有多少天？",
        "yi4 nian2 you3 duo1 shao3 tian1?",
        "平年有三百六十五天，闰年有三百六十六天。",
        "",
    ),
    (
        "zh13",
        "zh",
        "knowledge",
        "北京是哪个国家的首都？",
        "bei3 jing1 shi4 na3 ge4 guo2 jia1 de5 shou3 du1?",
        "北京是中国的首都。",
        "",
    ),
    ("zh14", "zh", "time_weather", "今天星期几？", "jin1 tian1 xing1 qi1 ji3?", "今天是星期三。", ""),
    (
        "zh15",
        "zh",
        "device_control",
        "关掉卧室的灯。",
        "guan1 diao4 wo4 shi4 de5 deng1.",
        "好的，卧室的灯已经关了。",
        "set_light",
    ),
    ("en01", "en", "device_control", "Turn on the kitchen light.", "", "Okay, the kitchen light is on.", "set_light"),
    ("en02", "en", "device_control", "Set the volume to thirty.", "", "Done, the volume is now thirty.", "set_volume"),
    (
        "en03",
        "en",
        "time_weather",
        "What time is it now?",
        "",
        "It is three in the afternoon. Time for a short break.",
        "",
    ),
    (
        "en04",
        "en",
        "time_weather",
        "Will it rain tomorrow?",
        "",
        "There is a chance of light rain tomorrow. Take an umbrella.",
        "",
    ),
    (
        "en05",
        "en",
        "knowledge",
        "How tall is Mount Everest?",
        "",
        "Mount Everest is about eight thousand eight hundred meters tall.",
        "",
    ),
    (
        "en06",
        "en",
        "knowledge",
        "Why is the sky blue?",
        "",
        "Air scatters blue light more than red light. So the sky looks blue.",
        "",
    ),
    ("en07", "en", "knowledge", "How many legs does a spider have?", "", "A spider has eight legs.", ""),
    ("en08", "en", "knowledge", "What is the capital of France?", "", "The capital of France is Paris.", ""),
    (
        "en09",
        "en",
        "chitchat",
        "Tell me a short joke.",
        "",
        "Why did the scarecrow win an award? Because he was outstanding in his field.",
        "",
    ),
    ("en10", "en", "chitchat", "What is your name?", "", "I am your voice assistant. You can call me Zhi.", ""),
    (
        "en11",
        "en",
        "chitchat",
        "I feel a bit tired today.",
        "",
        "I am sorry to hear that. Maybe rest a little, and drink some water.",
        "",
    ),
    ("en12", "en", "knowledge", "How many days are in a week?", "", "A week has seven days.", ""),
    ("en13", "en", "knowledge", "What do bees make?", "", "Bees make honey and wax.", ""),
    ("en14", "en", "time_weather", "What day is it today?", "", "Today is Wednesday.", ""),
    ("en15", "en", "knowledge", "Who wrote Romeo and Juliet?", "", "William Shakespeare wrote Romeo and Juliet.", ""),
]

TOOL_ARGUMENTS = {
    "zh01": '{"room": "living room", "on": true}',
    "zh02": '{"level": 30}',
    "zh15": '{"room": "bedroom", "on": false}',
    "en01": '{"room": "kitchen", "on": true}',
    "en02": '{"level": 30}',
}

VOICES = {"zh": "cmn-latn-pinyin", "en": "en-us"}


def synthesize(text: str, voice: str) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "say.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-s", "150", "-w", str(path), text], check=True)
        clip = load_audio(path)  # converts espeak's 22.05 kHz to 16 kHz mono
    pcm = b"".join(f.pcm for f in clip.frames)
    return np.frombuffer(pcm, dtype="<i2")


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(RATE * seconds), dtype="<i2")


def write_wav(path: Path, samples: np.ndarray) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes(samples.astype("<i2").tobytes())


def interleaved(
    questions: list[tuple[str, str, str, str, str, str, str]],
) -> list[tuple[str, str, str, str, str, str, str]]:
    """Alternate the languages, so the first N questions of a short run cover both."""
    zh = [q for q in questions if q[1] == "zh"]
    en = [q for q in questions if q[1] == "en"]
    return [q for pair in zip(zh, en, strict=True) for q in pair]


def main() -> None:
    OUT.mkdir(exist_ok=True)
    with (OUT / "manifest.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "language", "category", "text", "audio", "answer", "tool", "tool_arguments"])
        for qid, lang, category, text, spoken, answer, tool in interleaved(QUESTIONS):
            speech = synthesize(spoken or text, VOICES[lang])
            write_wav(OUT / f"{qid}.wav", np.concatenate([silence(LEAD_S), speech, silence(TAIL_S)]))
            writer.writerow([qid, lang, category, text, f"{qid}.wav", answer, tool, TOOL_ARGUMENTS.get(qid, "{}")])
    print(f"wrote {len(QUESTIONS)} questions to {OUT}")


if __name__ == "__main__":
    main()
