"""Entry point: serve the configured ASR and TTS as OpenAI-compatible speech services until stopped.

    python -m pipeline.endpoints.speech --config configs/local.toml --port 8100 --out runs/speech \\
        [--host 127.0.0.1] [--api-key-env VAR] [--otlp-endpoint URL] [--run-id ID] [--max-body-mb 25] \\
        [--max-audio-s 1500] [--fixtures audio_fixtures]

Loads the models ``[asr]`` and ``[tts]`` name, then prints one line,
``speech services listening on http://HOST:PORT/v1 (run RUN_ID)``, and serves until SIGINT or
SIGTERM. Spans go to ``<out>/traces/<run_id>.jsonl`` and, with ``--otlp-endpoint`` (an OTLP/HTTP
traces URL) or the standard ``OTEL_EXPORTER_OTLP_*`` variables, over the wire. Point
xiaozhi-esp32-server's ``OpenaiASR`` ``base_url`` at ``.../v1/audio/transcriptions`` and its
``openai`` TTS ``api_url`` at ``.../v1/audio/speech``. With ``--llm-upstream URL`` it also passes
``/v1/chat/completions`` on to that LLM endpoint and times each call (``relay.py``): point the
server's ``openai`` LLM ``base_url`` at ``.../v1`` to see its LLM's first token too. With
``--fixtures FOLDER`` an oracle ASR (``[asr] impl = "oracle"``) hears the question whose clip the
upload is (``heard.py``): a server that sends only audio gets the fixture's text, at the oracle's
fixed latency (``configs/capacity-services.toml``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from pipeline.clock import RealClock
from pipeline.endpoints.serving import until_signalled
from pipeline.endpoints.speech import DEFAULT_MAX_BODY, SpeechServices, SpeechStages
from pipeline.endpoints.speech.bodies import MAX_AUDIO_S
from pipeline.endpoints.speech.question_match import FixtureEars
from pipeline.endpoints.speech.relay import LlmRelay
from pipeline.plan.run_plan import new_run_id
from pipeline.settings.audio import BadAudio
from pipeline.settings.config import ConfigError, load_config
from pipeline.settings.fixtures import FixtureError
from pipeline.settings.models import CacheModels, ModelError, default_cache
from pipeline.tracing import names
from pipeline.tracing.export import OtlpSettings, Tracing, otlp_from_env


async def serve(services: SpeechServices, run_id: str) -> None:
    async with services:
        print(f"speech services listening on {services.base_url} (run {run_id})", flush=True)
        await until_signalled()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.endpoints.speech", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--config", type=Path, action="append", required=True, help="TOML; later ones override")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100, help="0 = any free port")
    parser.add_argument("--out", type=Path, required=True, help="traces go to OUT/traces/RUN_ID.jsonl")
    parser.add_argument("--run-id", default="", help="default: a fresh one")
    parser.add_argument("--api-key-env", default="", help="require the key held by this environment variable")
    parser.add_argument("--otlp-endpoint", default="", help="also send spans to this OTLP/HTTP traces URL")
    parser.add_argument("--model-cache", type=Path, help="default: $XDG_CACHE_HOME/voice-latency-lab/models")
    parser.add_argument("--max-body-mb", type=float, default=DEFAULT_MAX_BODY / (1024 * 1024))
    parser.add_argument(
        "--max-audio-s", type=float, default=MAX_AUDIO_S, help="longest upload decoded; longer ones are refused"
    )
    parser.add_argument(
        "--llm-upstream",
        default="",
        help="also serve /v1/chat/completions, passed on to this OpenAI-compatible base URL (…/v1) and timed",
    )
    parser.add_argument("--llm-upstream-key-env", default="", help="the environment variable with the upstream's key")
    parser.add_argument(
        "--fixtures",
        type=Path,
        help="a fixtures folder: each upload is matched to its question's clip, whose text an oracle ASR hears",
    )
    return parser


def _services(
    args: argparse.Namespace,
    env: Mapping[str, str],
    stages: SpeechStages,
    key: str | None,
    tracing: Tracing,
    run_id: str,
    ears: FixtureEars | None = None,
) -> SpeechServices:
    """The services the command line asks for; with ``--llm-upstream``, the relay to that LLM too."""
    relay = None
    if args.llm_upstream:
        upstream_key = env.get(args.llm_upstream_key_env, "") if args.llm_upstream_key_env else ""
        relay = LlmRelay(args.llm_upstream, upstream_key, tracing.emit_request, RealClock())
    return SpeechServices(
        stages,
        tracing,
        RealClock(),
        args.host,
        args.port,
        key,
        max_body_bytes=int(args.max_body_mb * 1024 * 1024),
        attributes={names.RUN_ID: run_id},
        relay=relay,
        ears=ears,
        max_audio_s=args.max_audio_s,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    env = os.environ
    key = env.get(args.api_key_env) if args.api_key_env else None
    if args.api_key_env and not key:
        print(f"speech services: the variable {args.api_key_env} is not set", file=sys.stderr)
        return 2
    try:
        otlp = OtlpSettings(args.otlp_endpoint) if args.otlp_endpoint else otlp_from_env(env)
        cfg = load_config(args.config)
        stages = SpeechStages.load(cfg, CacheModels(args.model_cache or default_cache(env)))
        ears = FixtureEars.load(args.fixtures) if args.fixtures else None
    except (ConfigError, ModelError, FixtureError, BadAudio, ValueError, KeyError, OSError) as exc:
        print(f"speech services: {exc}", file=sys.stderr)
        return 2
    run_id = args.run_id or new_run_id()
    service_name = env.get("OTEL_SERVICE_NAME", "lab-speech-services")
    tracing = Tracing(args.out / "traces" / f"{run_id}.jsonl", service_name, otlp)
    services = _services(args, env, stages, key, tracing, run_id, ears)
    try:
        asyncio.run(serve(services, run_id))
    except OSError as exc:
        print(f"speech services: {exc}", file=sys.stderr)
        return 1
    finally:
        tracing.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
