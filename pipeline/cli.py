"""What the entry points share: the model cache, quiet native telemetry and how they speak.

The entry points (``pipeline.replay``, ``pipeline.serve``, the capacity ramp, the speech services...) are
commands, never libraries of one another: what two of them need lives here, and only they import it. Like
them, this module may read the command line and the environment; nothing below the entry points may. Each
command's own options are its own (the replay's are ``pipeline.replay``'s); a run started as a child
process is written from its plan (``pipeline.plan.command_line``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pipeline.settings.models import default_cache


def model_cache(args: argparse.Namespace, env: Mapping[str, str]) -> Path:
    return Path(args.model_cache) if args.model_cache else default_cache(env)


def quiet_native_telemetry(env: Mapping[str, str]) -> None:
    """onnxruntime looks up telemetry hosts ~9 s after import unless told not to (docs/reference/stack.md).

    A voice pipeline that claims to run offline must not phone home, so telemetry is
    off unless the user explicitly set the variable (ORT_DISABLE_TELEMETRY=0 turns it on).
    """
    os.environ["ORT_DISABLE_TELEMETRY"] = env.get("ORT_DISABLE_TELEMETRY", "1")


def say_nothing(_message: str) -> None:
    pass


def say_on_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
