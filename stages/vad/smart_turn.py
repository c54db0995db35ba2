"""Smart Turn v3.2, Pipecat's end-of-turn model, stacked on a frame VAD: the VAD hears a pause, the model says
whether the turn is finished.

The inner VAD (``inner``: silero by default, or ten or energy, each under the lab's end-pointer with its own
settings but ``silence_ms``, which is ``inner_silence_ms``, 200 ms as Pipecat pairs it with Smart Turn) hears a
pause. The model then hears the turn so far and says "finished" (the end-point: ``SpeechEnd``) or "wait": listening
goes on, speech that resumes continues the same utterance and its next pause is judged again, and a pause that
grows to ``max_silence_ms`` since the speech ended ends the turn all the same (``stages/vad/endpointer.py``).

What the model hears, as Pipecat's ``LocalSmartTurnAnalyzerV3`` (pipecat-ai 1.14.0,
``pipecat/audio/turn/smart_turn/local_smart_turn_v3.py`` and ``base_smart_turn.py``) prepares it: the turn's
16 kHz audio from ``pre_speech_ms`` (500) before its speech began, its last 8 s, zeros in front when shorter,
normalised to zero mean and unit variance, as Whisper's 80 x 800 log-mel features; the model's output is the
probability that the turn is finished, and above ``threshold`` (0.5) it is. The features are faster-whisper's
numpy ``FeatureExtractor`` (the same as Pipecat's vendored copy of transformers' ``WhisperFeatureExtractor``, to
within 1e-5: ``tests/stages/vad/test_smart_turn.py``).

The model is the ONNX file inside the ``pipecat-ai`` wheel, found through the model registry
(``smart-turn-v3.2``, pinned by sha256) without importing ``pipecat``, which needs its own dependencies; the wheel
is installed ``--no-deps`` with the other model packages. onnxruntime is imported when the model loads, after the
entry point has set ``ORT_DISABLE_TELEMETRY``. Features and inference run on the model's own thread (about 25 ms
of CPU here), one intra-op thread, so that thread's CPU clock read around them is the decision's whole cost:
every verdict is recorded as a ``VadDecision`` with its probability and CPU.
"""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.events import SAMPLE_RATE, VERDICT_FINISHED, VERDICT_WAIT, VadDecision, thread_cpu_ns
from stages.registry import ConfigError, Implementation, Loaded, Models, TurnInputs, load_file, require_positive
from stages.threads import on_thread
from stages.vad.endpointer import FrameVad
from stages.vad.energy import IMPLEMENTATION as ENERGY
from stages.vad.silero import IMPLEMENTATION as SILERO
from stages.vad.ten import IMPLEMENTATION as TEN

MODEL = "smart-turn-v3.2"  # the registry's name for the ONNX file in the pipecat-ai wheel
WHEEL = "pipecat-ai==1.14.0"
WINDOW_S = 8  # the model hears the last 8 s
N_MELS, N_FRAMES = 80, 800
INNER = {"silero": SILERO, "ten": TEN, "energy": ENERGY}


def check_installed(model: str) -> None:
    """Refuses, naming what to install, a Smart Turn whose packages are missing: onnxruntime and faster-whisper
    (the ``smartturn`` extra), and for the packaged model the pipecat-ai wheel."""
    for module, package in (("onnxruntime", "onnxruntime"), ("faster_whisper", "faster-whisper")):
        if importlib.util.find_spec(module) is None:
            raise ValueError(f"[vad] impl = 'smart-turn' needs {package}: pip install 'voice-latency-lab[smartturn]'")
    if model == MODEL and importlib.util.find_spec("pipecat") is None:
        raise ValueError(
            "[vad] impl = 'smart-turn' needs the pipecat-ai wheel, which holds its model: "
            f"pip install --no-deps {WHEEL} (make test installs it with the model packages, requirements-models.txt)"
        )


class SmartTurnModel:
    """The ONNX model, loaded once per run and shared by every turn, with its features and its own thread."""

    def __init__(self, path: Path) -> None:
        import onnxruntime as ort  # imported here: the entry point sets ORT_DISABLE_TELEMETRY first
        from faster_whisper.feature_extractor import FeatureExtractor

        options = ort.SessionOptions()  # as Pipecat's: sequential, one thread (its cpu_count default)
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self.session: Any = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types for bad files
            raise ValueError(f"{path}: not a usable Smart Turn model ({exc})") from None
        inputs = self.session.get_inputs()
        if [i.name for i in inputs] != ["input_features"] or list(inputs[0].shape[1:]) != [N_MELS, N_FRAMES]:
            raise ValueError(f"{path}: not a Smart Turn v3 model (it takes no input_features of 80 x 800)")
        self.name = path.name
        self._features = FeatureExtractor(feature_size=N_MELS, chunk_length=WINDOW_S)
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="smart-turn")

    def features(self, audio: np.ndarray) -> np.ndarray:
        """Whisper's log-mel features (80 x 800) of the last 8 s of ``audio`` (16 kHz, float in [-1, 1]), zeros in
        front when it is shorter, normalised to zero mean and unit variance first, as Pipecat prepares them."""
        window = WINDOW_S * SAMPLE_RATE
        audio = np.asarray(audio, dtype=np.float32)[-window:]
        audio = np.pad(audio, (window - audio.size, 0))
        audio = (audio - audio.mean()) / np.sqrt(audio.var() + 1e-7)
        features: np.ndarray = self._features(audio, padding=0)
        return features.astype(np.float32)

    def probability(self, pcm: bytes) -> tuple[float, int]:
        """The probability that the turn in ``pcm`` (16-bit PCM) is finished, and the CPU this thread spent on it."""
        start = thread_cpu_ns()
        audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        outputs = self.session.run(None, {"input_features": self.features(audio)[None]})
        return float(outputs[0][0].item()), thread_cpu_ns() - start


@dataclass(frozen=True, slots=True)
class SmartTurnSettings:
    """The ``[vad]`` keys of ``impl = "smart-turn"``: the model, its verdict's threshold, how long a pause may grow
    after a "wait", the audio it hears before speech began, and the VAD it is stacked on with that VAD's silence."""

    model: str = MODEL
    threshold: float = 0.5  # Pipecat's: a probability above it is a finished turn
    max_silence_ms: int = 3000  # Pipecat's stop_secs: after a "wait", a pause this long ends the turn
    pre_speech_ms: int = 500  # Pipecat's pre_speech_ms: audio before the speech began, heard with the turn
    inner: str = "silero"  # the VAD that hears the pauses: "silero", "ten" or "energy", with its own defaults
    inner_silence_ms: int = 200  # its silence: Pipecat's VADParams(stop_secs=0.2) beside Smart Turn

    def __post_init__(self) -> None:
        if not 0 < self.threshold < 1:
            raise ConfigError(f"[vad] threshold = {self.threshold}: a probability between 0 and 1")
        require_positive("vad", max_silence_ms=self.max_silence_ms, inner_silence_ms=self.inner_silence_ms)
        if self.pre_speech_ms < 0:
            raise ConfigError(f"[vad] pre_speech_ms = {self.pre_speech_ms}: must be >= 0")
        if self.inner not in INNER:
            raise ConfigError(f"[vad] inner = {self.inner!r}: choose one of {', '.join(INNER)}")
        if self.max_silence_ms <= self.inner_silence_ms:
            raise ConfigError(
                f"[vad] max_silence_ms = {self.max_silence_ms}: must be longer than inner_silence_ms = "
                f"{self.inner_silence_ms}, the pause at which the model is asked"
            )


class SmartTurnJudge:
    """One turn's Smart Turn over the shared model: the ``PauseJudge`` of ``FrameVad``. It keeps the last 8 s it
    heard, and at a pause hands the turn's part of them to the model's thread."""

    name = "smart-turn"

    def __init__(self, model: SmartTurnModel, s: SmartTurnSettings) -> None:
        self.model = model
        self.threshold = s.threshold
        self.max_silence_ms = s.max_silence_ms
        self.pre_speech_ms = s.pre_speech_ms
        self.attributes: tuple[tuple[str, str | int | float | bool], ...] = (
            ("vad.turn_model", model.name),
            ("vad.turn_threshold", s.threshold),
            ("vad.max_silence_ms", s.max_silence_ms),
            ("vad.pre_speech_ms", s.pre_speech_ms),
        )
        self.reset()

    def reset(self) -> None:
        self._audio = bytearray()  # the last WINDOW_S seconds heard, at least
        self._heard = 0  # samples heard in the turn

    def hear(self, pcm: bytes) -> None:
        self._audio += pcm
        self._heard += len(pcm) // 2
        keep = WINDOW_S * SAMPLE_RATE * 2
        if len(self._audio) > 2 * keep:  # trimmed now and then, not on every frame
            del self._audio[:-keep]

    async def judge(self, speech_start_ms: int, speech_end_ms: int, at_ms: int) -> VadDecision:
        begin = max(0, speech_start_ms - self.pre_speech_ms) * SAMPLE_RATE // 1000  # in samples
        first_kept = self._heard - len(self._audio) // 2
        pcm = bytes(self._audio[max(0, begin - first_kept) * 2 :])
        probability, cpu_ns = await on_thread(self.model.thread, self.model.probability, pcm)
        verdict = VERDICT_FINISHED if probability > self.threshold else VERDICT_WAIT
        return VadDecision(verdict, at_ms, speech_end_ms, probability=probability, cpu_ns=cpu_ns)


@dataclass(frozen=True, slots=True)
class SmartTurnEngine:
    """What a run loads once: the model, and the inner VAD's implementation, its settings and what it loaded."""

    model: SmartTurnModel
    inner: Implementation
    inner_settings: Any
    inner_engine: object


def _load(s: SmartTurnSettings, models: Models) -> Loaded:
    check_installed(s.model)
    inner = INNER[s.inner]
    inner_settings = inner.settings_of({"silence_ms": s.inner_silence_ms})
    inner_loaded = inner.load(inner_settings, models) if inner.load is not None else Loaded(None, "")
    loaded = load_file(models, s.model, SmartTurnModel)
    identity = "; ".join(i for i in (loaded.identity, inner_loaded.identity) if i)
    assert isinstance(loaded.engine, SmartTurnModel)
    return Loaded(SmartTurnEngine(loaded.engine, inner, inner_settings, inner_loaded.engine), identity)


def _build(s: SmartTurnSettings, engine: SmartTurnEngine, turn: TurnInputs) -> FrameVad:
    vad = engine.inner.build(engine.inner_settings, engine.inner_engine, turn)
    if not isinstance(vad, FrameVad):  # every INNER builds one with the lab's profile
        raise ConfigError(f"[vad] inner = {s.inner!r}: not a frame VAD Smart Turn can stack on")
    judge = SmartTurnJudge(engine.model, s)
    return FrameVad(vad.classifier, vad.silence_ms, vad.min_speech_ms, vad.threshold, judge=judge)


IMPLEMENTATION = Implementation("vad", "smart-turn", SmartTurnSettings, _build, load=_load)
