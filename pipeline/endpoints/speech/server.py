"""The lab's ASR and TTS as OpenAI-compatible HTTP services, each request traced as its stage's span.

Routes (OpenAI's audio API):

- ``POST /v1/audio/transcriptions``: multipart ``file`` (any audio libsndfile reads, no longer than
  ``max_audio_s``: 1500 s, gpt-4o-transcribe's limit, unless set) and ``model``;
  optional ``language``, ``response_format`` (json, text, verbose_json), ``prompt`` (none),
  ``temperature`` (0). Answers ``{"text": ...}``.
- ``POST /v1/audio/speech``: JSON ``model``, ``input``; optional ``voice``, ``response_format``
  (wav, flac, mp3, opus, pcm; OpenAI's default mp3), ``speed`` (1.0). Answers the audio.
- ``GET /v1/models``: the configured stages; ``GET /health``: no key needed.

Whatever ``model`` and ``voice`` a client names, the configured stage serves it; the span
records what was asked. Every request to the two audio routes is one span named as the
in-process stage's (``asr``, ``tts``) with its stage attributes, the service's own timings
(read, decode, compute, encode), and the caller's trace when it sent a ``traceparent``. A
refused or failed request answers OpenAI's error JSON and is a failed span with
``error.type`` = the error's ``code``; the next request is served as if nothing happened.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from pipeline.clock import Clock
from pipeline.endpoints.doors import SlowBody, body_within
from pipeline.endpoints.serving import HttpApp
from pipeline.endpoints.speech import bodies, forms
from pipeline.endpoints.speech.api_errors import ApiError
from pipeline.endpoints.speech.question_match import FixtureEars
from pipeline.endpoints.speech.relay import LlmRelay
from pipeline.endpoints.speech.speech_stages import SpeechStages, asr_events, run_stage, tts_events
from pipeline.events import AudioOut, Event, Stage, Transcript
from pipeline.tracing import names
from pipeline.tracing.export import Tracing
from pipeline.tracing.service_spans import Attributes, RequestTiming

TRANSCRIPTIONS = "/v1/audio/transcriptions"
SPEECH = "/v1/audio/speech"
CHAT = "/v1/chat/completions"  # served only with a relay (``--llm-upstream``)
DEFAULT_MAX_BODY = 25 * 1024 * 1024  # OpenAI's limit on an upload
SAID_CHARS = 160  # of what a library said of a failure, in the error: enough to read, never the whole input echoed

Work = Callable[[web.Request, RequestTiming], Awaitable[web.StreamResponse]]
Body = TypeVar("Body")


def _ms(start_ns: int, end_ns: int) -> float:
    return round((end_ns - start_ns) / 1e6, 3)


class SpeechServices(HttpApp):
    """The server. ``await start()`` returns the port; ``base_url`` is what a client is given."""

    def __init__(
        self,
        stages: SpeechStages,
        tracing: Tracing,
        clock: Clock,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY,
        attributes: Mapping[str, Any] | None = None,
        relay: LlmRelay | None = None,
        ears: FixtureEars | None = None,
        max_audio_s: float = bodies.MAX_AUDIO_S,
    ) -> None:
        if max_body_bytes <= 0:
            raise ValueError(f"max_body_bytes must be positive, got {max_body_bytes}")
        if not max_audio_s > 0:
            raise ValueError(f"max_audio_s must be positive, got {max_audio_s}")
        super().__init__(host, port)
        self.stages, self.tracing, self.clock = stages, tracing, clock
        self.max_body_bytes, self.max_audio_s = max_body_bytes, max_audio_s
        self.attributes: Attributes = dict(attributes or {})  # on every span (the run id, say)
        self._api_key = api_key
        self.relay = relay  # chat requests passed on to an LLM and timed (``relay.py``), when given
        self.ears = ears  # which fixture question an upload is, for an oracle ASR (``heard.py``), when given

    def app(self) -> web.Application:
        # One byte over the limit is enough to refuse; the slack keeps multipart framing out of the count.
        app = web.Application(client_max_size=self.max_body_bytes + 64 * 1024)
        app.router.add_post(TRANSCRIPTIONS, self._transcriptions)
        app.router.add_post(SPEECH, self._speech)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        if self.relay is not None:
            app.router.add_post(CHAT, self._chat)
        return app

    async def stop(self) -> None:
        await super().stop()
        if self.relay is not None:
            await self.relay.close()

    # --- the two audio routes ---------------------------------------------------------------

    async def _transcriptions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, names.ASR, TRANSCRIPTIONS, self._transcribe)

    async def _speech(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, names.TTS, SPEECH, self._speak)

    async def _serve(self, request: web.Request, name: str, route: str, work: Work) -> web.StreamResponse:
        """Run one request's ``work``; whatever happens, the request becomes one span."""
        timing = RequestTiming(name, self.clock.now_ns(), attributes={**self.attributes, names.HTTP_ROUTE: route})
        try:
            self._authorize(request)
            response = await work(request, timing)
        except ApiError as exc:
            response = self._failed(timing, exc)
        except Exception as exc:  # the stage or a codec broke: a 500 and a failed span, and the server goes on
            what = timing.stage.impl if timing.stage is not None else "service"
            said = f"{type(exc).__name__}: {exc}"[:SAID_CHARS]
            response = self._failed(timing, ApiError(500, "stage_error", f"{what} failed: {said}"))
        return self._ended(request, timing, response)

    def _ended(self, request: web.Request, timing: RequestTiming, response: web.StreamResponse) -> web.StreamResponse:
        """The request's span, ended now with the response's status."""
        timing.end_ns = self.clock.now_ns()
        timing.attributes[names.HTTP_STATUS] = response.status
        self.tracing.emit_request(timing, request.headers.get("traceparent", ""))
        return response

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        assert self.relay is not None
        timing = RequestTiming(
            names.LLM_CALL, self.clock.now_ns(), attributes={**self.attributes, names.HTTP_ROUTE: CHAT}
        )
        try:
            self._authorize(request)
        except ApiError as exc:
            return self._ended(request, timing, self._failed(timing, exc))
        return await self.relay.chat(request, timing, self.limits.body_s)

    @staticmethod
    def _failed(timing: RequestTiming, exc: ApiError) -> web.Response:
        timing.error_type, timing.error_message = exc.code, exc.message
        return exc.response()

    def _authorize(self, request: web.Request) -> None:
        if not self._api_key:
            return
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self._api_key}".encode()):
            raise ApiError(401, "invalid_api_key", "Incorrect API key provided: send 'Authorization: Bearer KEY'.")

    async def _read(self, request: web.Request, content_type: str, read: Callable[[], Awaitable[Body]]) -> Body:
        """The request's body by ``read``; refused when it is not ``content_type`` or is over the limit."""
        if request.content_type != content_type:
            raise ApiError(
                415,
                "unsupported_media_type",
                f"the body must be {content_type}, not {request.content_type or 'untyped'}",
            )
        if request.content_length is not None and request.content_length > self.max_body_bytes:
            raise self._too_large()
        try:
            return await body_within(read(), self.limits.body_s)
        except web.HTTPRequestEntityTooLarge:
            raise self._too_large() from None
        except SlowBody as exc:
            raise ApiError(408, "request_timeout", str(exc)) from None

    def _received(self, timing: RequestTiming, size: int) -> None:
        """The input's size on the span; refused over the limit (a chunked body has no length to check first)."""
        timing.attributes[names.SERVICE_INPUT_BYTES] = size
        if size > self.max_body_bytes:
            raise self._too_large()

    def _too_large(self) -> ApiError:
        mib = self.max_body_bytes / (1024 * 1024)
        return ApiError(413, "request_too_large", f"the request body is over this server's limit of {mib:g} MiB")

    async def _compute(
        self, stage: Stage, events: list[Event], timing: RequestTiming, since: int
    ) -> tuple[list[Event], int]:
        """The stage's output for ``events`` and when it ended; its compute time, and when its first audio
        came, on the span."""
        timing.stage = stage.info
        out: list[Event] = []
        sounded = False
        async for event in run_stage(stage, events):
            if isinstance(event, AudioOut) and not sounded:
                timing.events.append((names.EV_FIRST_FRAME, self.clock.now_ns()))
                sounded = True
            out.append(event)
        computed = self.clock.now_ns()
        timing.attributes[names.SERVICE_COMPUTE_MS] = _ms(since, computed)
        return out, computed

    async def _transcribe(self, request: web.Request, timing: RequestTiming) -> web.StreamResponse:
        try:
            fields = await self._read(request, "multipart/form-data", request.post)
        except (ValueError, HttpProcessingError) as exc:  # aiohttp's reader on a malformed multipart body: a part's
            # header line over 8190 bytes is a LineTooLong, whose message holds the whole line
            said = (exc.message if isinstance(exc, HttpProcessingError) else str(exc))[:SAID_CHARS]
            raise ApiError(400, "invalid_multipart", f"the multipart body cannot be read ({said})") from None
        for key, field in ((names.SERVICE_MODEL, "model"), (names.SERVICE_FORMAT, "response_format")):
            if isinstance(fields.get(field), str):
                timing.attributes[key] = str(fields[field])
        form = forms.transcription(fields)
        self._received(timing, len(form.audio))
        read = self.clock.now_ns()
        timing.attributes[names.SERVICE_READ_MS] = _ms(timing.start_ns, read)
        timing.attributes[names.SERVICE_FORMAT] = form.response_format
        upload = await asyncio.to_thread(_decode, form.audio, self.max_audio_s)
        decoded = self.clock.now_ns()
        timing.attributes[names.SERVICE_DECODE_MS] = _ms(read, decoded)
        timing.attributes[names.SERVICE_INPUT_FORMAT] = upload.kind
        timing.attributes[names.AUDIO_MS] = upload.duration_ms
        language, text = form.language, ""
        if self.ears is not None:
            heard = await asyncio.to_thread(self.ears.hear, upload.pcm)
            timing.attributes[names.HEARD_QUESTION] = heard.question_id if heard else ""
            timing.attributes[names.HEARD_SCORE] = heard.score if heard else 0.0
            # no match: the oracle hears no words, in no language ("und", BCP 47's undetermined)
            language, text = (language or heard.language, heard.text) if heard else (language or "und", "")
        try:
            stage = self.stages.asr_stage(language, text)
        except ValueError as exc:
            raise ApiError(400, "unsupported_language", str(exc), "language") from None
        out, _ = await self._compute(stage, asr_events(upload.pcm, upload.duration_ms), timing, decoded)
        transcript = next((e for e in reversed(out) if isinstance(e, Transcript)), None)
        if transcript is None:
            raise ApiError(500, "no_transcript", f"the {stage.info.impl} ASR ended without a transcript")
        timing.attributes[names.TRANSCRIPT] = transcript.text
        timing.attributes[names.ASR_LANGUAGE] = transcript.language
        body, content_type = _transcription_body(form.response_format, transcript, upload.duration_ms)
        timing.attributes[names.SERVICE_OUTPUT_BYTES] = len(body)
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _speak(self, request: web.Request, timing: RequestTiming) -> web.StreamResponse:
        raw = await self._read(request, "application/json", request.read)
        self._received(timing, len(raw))
        body = forms.json_body(raw)
        if isinstance(body, dict):
            for key, field in ((names.SERVICE_MODEL, "model"), (names.SERVICE_VOICE, "voice")):
                if isinstance(body.get(field), str):
                    timing.attributes[key] = body[field]
        spoken = forms.speech(body)
        read = self.clock.now_ns()
        timing.attributes[names.SERVICE_READ_MS] = _ms(timing.start_ns, read)
        timing.attributes[names.SERVICE_FORMAT] = spoken.response_format
        timing.attributes[names.SENTENCE_INDEX] = 0
        timing.attributes[names.SENTENCE_TEXT] = spoken.text
        stage = self.stages.tts_stage()
        out, computed = await self._compute(stage, tts_events(spoken.text), timing, read)
        frames = [e for e in out if isinstance(e, AudioOut)]
        timing.attributes[names.AUDIO_MS] = sum(f.duration_ms for f in frames)
        pcm = b"".join(f.pcm for f in frames)
        if not pcm:
            raise ApiError(500, "no_audio", f"the {stage.info.impl} TTS produced no audio for this input")
        body_bytes = await asyncio.to_thread(bodies.encode, pcm, spoken.response_format)
        timing.attributes[names.SERVICE_ENCODE_MS] = _ms(computed, self.clock.now_ns())
        timing.attributes[names.SERVICE_OUTPUT_BYTES] = len(body_bytes)
        content_type = bodies.OUTPUT_FORMATS[spoken.response_format].content_type
        return web.Response(body=body_bytes, headers={"Content-Type": content_type})

    # --- the rest ------------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        try:
            self._authorize(request)
        except ApiError as exc:
            return exc.response()
        data = [
            {"id": role.model_id, "object": "model", "created": 0, "owned_by": "voice-latency-lab"}
            for role in (self.stages.asr, self.stages.tts)
        ]
        return web.json_response({"object": "list", "data": data})

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "asr": self.stages.asr.impl.name, "tts": self.stages.tts.impl.name})


def _decode(data: bytes, max_s: float) -> bodies.Upload:
    try:
        return bodies.decode(data, max_s)
    except bodies.TooLong as exc:
        raise ApiError(400, "audio_too_long", str(exc), "file") from None
    except bodies.NoSamples as exc:
        raise ApiError(400, "empty_file", f"the uploaded audio is empty: {exc}", "file") from None
    except bodies.NotAudio as exc:
        raise ApiError(415, "invalid_file_format", str(exc), "file") from None


def _transcription_body(response_format: str, transcript: Transcript, duration_ms: int) -> tuple[bytes, str]:
    """The response body in ``response_format`` and its content type."""
    if response_format == "text":
        return transcript.text.encode("utf-8"), "text/plain; charset=utf-8"
    answer: dict[str, Any] = {"text": transcript.text}
    if response_format == "verbose_json":
        # OpenAI's verbose form also has segments and words; the stage gives neither, so none are made up
        answer = {"task": "transcribe", "language": transcript.language, "duration": duration_ms / 1000, **answer}
    return json.dumps(answer, ensure_ascii=False).encode("utf-8"), "application/json"
