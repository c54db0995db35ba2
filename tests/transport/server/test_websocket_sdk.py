"""A third-party xiaozhi client, xiaozhi-sdk 0.5.1 from PyPI, against ``python -m pipeline.serve``.

The sdk speaks the packaged fixtures over real WebSocket connections, as a device streams its
microphone (tests/sdk_device.py); the server end-points and recognises that speech with the
real Silero VAD and Whisper, and answers with the scripted LLM and the stub TTS
(configs/interop.toml). Auto mode, realtime mode with three questions on one connection, 20 and
60 ms frames, manual mode, and a tool call answered by the sdk's MCP. Where the sdk misbehaves
by itself, tests/sdk_device.py works around it and names the sdk's file and line; nothing skips.
"""

from __future__ import annotations

import asyncio
import ctypes.util
import importlib
import itertools
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from pipeline.events import FRAME_MS
from pipeline.settings.config import load_config
from pipeline.transport.wire.opus import OpusDecoder, OpusEncoder
from stages.tts.stub import speech_duration_ms
from tests.paths import REPO_ROOT
from tests.sdk_device import SAMPLE_RATE, Answer, SdkDevice, connected, sdk

pytestmark = [pytest.mark.real, pytest.mark.transport]

ROOT = REPO_ROOT
FIXTURES = ROOT / "audio_fixtures"
CONFIG = ROOT / "configs" / "interop.toml"
ANSWER_WITHIN_S = 30.0  # speech end to tts stop; a loaded two-core machine runs Whisper slowly
# what Whisper must hear in each question the sdk asks (the manifest's text, lower case)
HEARS = {"en03": "time", "en08": "france", "en12": "week", "en13": "bee"}
SET_LIGHT = {  # the tool en01's scripted answer calls (manifest: set_light), named as firmware names its tools
    "name": "self.light.set_light",
    "description": "Turn the light in a room on or off.",
    "inputSchema": {
        "type": "object",
        "properties": {"room": {"type": "string"}, "on": {"type": "boolean"}},
        "required": ["room", "on"],
    },
}

T = TypeVar("T")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m pipeline.serve`` on a free loopback port for this module's tests, stopped at the end."""
    out = tmp_path_factory.mktemp("interop-server")
    command = [sys.executable, "-m", "pipeline.serve", str(FIXTURES), "--config", str(CONFIG), "--language", "en"]
    command += ["--port", "0", "--out", str(out), "--quiet"]
    errors = out / "stderr.txt"
    with errors.open("w", encoding="utf-8") as err:
        env = {**os.environ, "ORT_DISABLE_TELEMETRY": "1"}
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
        found = re.search(r"serving (ws://\S+)", line)
        if found is None:
            proc.kill()
            proc.communicate(timeout=10)
            raise AssertionError(f"no server: {line!r}\n{errors.read_text(encoding='utf-8')}")
        yield found.group(1)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        said, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, errors.read_text(encoding="utf-8")
    assert "turn(s)" in said


@pytest.fixture(autouse=True)
def sdk_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """The sdk logs what it swallows (undecodable audio, a failing callback or MCP message): none may happen."""
    with caplog.at_level(logging.WARNING, logger="xiaozhi_sdk"):
        yield
    failed = [r.getMessage() for r in caplog.records if r.name == "xiaozhi_sdk" and r.levelno >= logging.ERROR]
    assert not failed, failed


def run(scenario: Callable[[], Awaitable[T]], within_s: float = 150.0) -> T:
    async def main() -> T:
        return await asyncio.wait_for(scenario(), within_s)

    return asyncio.run(main())


def fixture(question_id: str) -> Path:
    return FIXTURES / f"{question_id}.wav"


def stub_frames(sentences: list[str]) -> int:
    """The frames the stub TTS voices for these sentences (stages/tts/stub.py)."""
    return sum(speech_duration_ms(s) // FRAME_MS for s in sentences)


def assert_answered(answer: Answer, hears: str) -> None:
    """Heard as asked, answered in sentences, every frame of their audio decoded by the sdk, then stopped."""
    assert hears in answer.heard.lower(), answer
    assert answer.complete and answer.sentences and all(answer.sentences), answer
    assert answer.audio_frames == stub_frames(answer.sentences), answer


async def ask(device: SdkDevice, question_id: str) -> Answer:
    """Speak the question, then the noise floor until its answer has stopped and a breath after it."""
    before = len(device.answers())
    await device.speak(fixture(question_id))
    await device.wait_until(
        lambda: len(device.answers()) > before and device.answers()[-1].complete, ANSWER_WITHIN_S, "answer"
    )
    await device.wait(0.5)
    return device.answers()[-1]


def test_the_interop_config_hears_for_real_and_answers_from_the_script() -> None:
    cfg = load_config(CONFIG)
    assert (cfg.vad.impl, cfg.asr.impl, cfg.llm.impl, cfg.tts.impl) == ("silero", "whisper", "scripted", "stub")


def test_the_sdks_libopus_and_the_labs_work_side_by_side_in_one_process() -> None:
    """The sdk brings its own libopus through a find_library hook: the lab's codec must be unaffected."""
    sdk()
    assert "xiaozhi_sdk" not in str(ctypes.util.find_library("opus"))  # the hook does not outlive the import
    opus = importlib.import_module("xiaozhi_sdk.opus").AudioOpus(SAMPLE_RATE, 1, FRAME_MS)
    opus.set_out_audio_frame({"sample_rate": SAMPLE_RATE, "channels": 1, "frame_duration": FRAME_MS})
    t = np.arange(SAMPLE_RATE * FRAME_MS // 1000) / SAMPLE_RATE
    tone = (3000 * np.sin(2 * np.pi * 440 * t)).astype("<i2")
    lab_encoder, lab_decoder = OpusEncoder(), OpusDecoder()

    async def both_ways() -> tuple[np.ndarray, np.ndarray]:
        for _ in range(5):  # past both encoders' first frames
            theirs = np.frombuffer(lab_decoder.decode(await opus.pcm_to_opus(tone.tobytes())), "<i2")
            ours = (await opus.opus_to_pcm(lab_encoder.encode(tone.tobytes()))).reshape(-1)
        return theirs, ours

    theirs, ours = run(both_ways)
    for decoded in (theirs, ours):
        assert abs(float(np.sqrt(np.mean(decoded.astype(float) ** 2))) - 3000 / np.sqrt(2)) < 300


@pytest.mark.parametrize("frame_ms", [20, 60])
def test_auto_mode_answers_each_question_and_the_sdk_listens_again_by_itself(server: str, frame_ms: int) -> None:
    async def scenario() -> tuple[list[Answer], np.ndarray]:
        async with connected(server, "auto", frame_ms) as device:
            await ask(device, "en03")
            # the server waits for the next listen start, which the sdk sends on tts stop (core.py:195-196)
            await ask(device, "en13")
            return device.answers(), device.audio()

    answers, audio = run(scenario)
    assert len(answers) == 2
    assert_answered(answers[0], HEARS["en03"])
    assert_answered(answers[1], HEARS["en13"])
    # the stub's 220 Hz tone at amplitude 3000, as the sdk's own libopus decoded it in this process
    spectrum = np.abs(np.fft.rfft(audio.astype(float)))
    assert abs(np.argmax(spectrum) * SAMPLE_RATE / audio.size - 220) < 5
    loud = audio[np.abs(audio) > 100].astype(float)
    assert abs(float(np.sqrt(np.mean(loud**2))) - 3000 / np.sqrt(2)) < 400


def test_realtime_mode_answers_three_questions_on_one_connection_in_order(server: str) -> None:
    """One listen start (the sdk's default mode); each question started by the server's VAD alone."""

    async def scenario() -> SdkDevice:
        async with connected(server, "realtime") as device:
            for question_id in ("en03", "en08", "en12"):
                await ask(device, question_id)
            return device

    device = run(scenario)
    answers = device.answers()
    assert len(answers) == 3, device.said()
    for answer, question_id in zip(answers, ("en03", "en08", "en12"), strict=True):
        assert_answered(answer, HEARS[question_id])
    assert all(a.stopped_at < b.stt_at for a, b in itertools.pairwise(answers))
    assert not [h for h in device.heard if h.message.get("type") == "abort"]


def test_manual_mode_is_answered_on_listen_stop_not_on_the_vads_end_point(server: str) -> None:
    """The sdk has no manual mode of its own: its mode is set, and ``listen stop`` sent through its WebSocket.

    It says ``listen start`` with its mode as it connects (core.py:244), the button going down; the user
    then speaks, holds the button through 1.5 s of quiet (more than the VAD's 600 ms), and lets go.
    """

    async def scenario() -> tuple[Answer, float, int]:
        async with connected(server, "manual") as device:
            await device.speak(fixture("en08"))
            await device.wait(1.5)
            heard_before_stop = len(device.heard)
            released = asyncio.get_running_loop().time()
            await device.send_json({"type": "listen", "state": "stop"})
            await device.wait_until(lambda: bool(device.answers()) and device.answers()[0].complete, 30, "answer")
            return device.answers()[0], released, heard_before_stop

    answer, released, heard_before_stop = run(scenario)
    assert heard_before_stop == 0  # nothing recognised while the button was held
    assert answer.stt_at > released
    assert_answered(answer, HEARS["en08"])


def test_a_tool_call_turn_is_answered_with_the_sdks_mcp_tool(server: str) -> None:
    """The server lists the sdk's tools and calls its light tool over MCP; the sdk's answer ends the turn.

    A third-party client cannot name the question, so the scripted LLM would not know to call the
    tool: the test names it with the lab's one extra message (``lab``/``question``), which real servers
    ignore, sent through the sdk's WebSocket before the question's first frame. Whisper still hears
    the sdk's own speech.
    """
    calls: list[dict[str, Any]] = []

    def set_light(arguments: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        calls.append(arguments)
        return {"success": True}, False  # (result, is_error), as the sdk wants it (mcp.py:152-155)

    async def scenario() -> tuple[SdkDevice, Answer]:
        tool = {**SET_LIGHT, "tool_func": set_light}
        async with connected(server, "realtime", tools=[tool]) as device:
            listed = lambda: any(m.get("method") == "tools/list" for m in device.mcp)  # noqa: E731
            await device.wait_until(listed, 10, "MCP tools/list")
            await device.send_json({"type": "lab", "state": "question", "question_id": "en01", "round": 1})
            answer = await ask(device, "en01")
            return device, answer

    device, answer = run(scenario)
    assert calls == [{"room": "kitchen", "on": True}]
    methods = [m.get("method") for m in device.mcp]
    assert methods[:2] == ["initialize", "tools/list"] and methods.count("tools/call") == 1, methods
    initialize = device.mcp[0]
    assert {"url", "token"} <= set(initialize["params"]["capabilities"]["vision"])  # the sdk reads both (mcp.py:172)
    assert_answered(answer, "light")
    assert "the kitchen light is on" in " ".join(answer.sentences).lower()
