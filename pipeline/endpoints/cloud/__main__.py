"""Entry point: serve the emulated cloud, optionally behind the link emulator, until stopped.

    python -m pipeline.endpoints.cloud --profile fast-70b-api --port 8000 [--network internet]

Prints one line per address (``emulated cloud, profile X: http://127.0.0.1:PORT/v1`` and,
with ``--network``, ``through network profile Y: http://...``), then serves until
SIGINT or SIGTERM. ``--answers manifest.csv`` answers the fixture questions with their
``answer`` column; ``--api-key-env NAME`` requires the key held by that variable.
``--allow-fault-header`` lets a request's ``X-Emulator-Fault`` header choose a fault (tests only).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pipeline.endpoints.cloud import COMPUTE_PROFILES, FAULT_HEADER, FAULTS, EmulatedCloud, get_compute_profile
from pipeline.endpoints.link import PROFILES, LinkEmulator, get_profile
from pipeline.endpoints.serving import until_signalled


def _answers(path: Path | None) -> dict[str, str]:
    if path is None:
        return {}
    with path.open(encoding="utf-8", newline="") as fh:
        return {row["text"].strip(): row["answer"] for row in csv.DictReader(fh) if row.get("answer")}


async def serve(cloud: EmulatedCloud, network: str, network_port: int) -> None:
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(cloud)
        print(f"{cloud.label}: {cloud.base_url}", flush=True)
        if network:
            link = LinkEmulator(get_profile(network), cloud.host, cloud.port, cloud.host, network_port)
            await stack.enter_async_context(link)
            print(f"through network profile {network}: http://{cloud.host}:{link.port}/v1", flush=True)
        await until_signalled()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.endpoints.cloud", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 = any free port")
    parser.add_argument("--profile", default="fast-70b-api", help=f"compute: {', '.join(COMPUTE_PROFILES)}")
    parser.add_argument("--model", default="emulated-cloud")
    parser.add_argument("--network", default="", help=f"serve through the link emulator too: {', '.join(PROFILES)}")
    parser.add_argument("--network-port", type=int, default=0)
    parser.add_argument("--fault", default="", choices=FAULTS, help="answer every request with this fault")
    parser.add_argument(
        "--allow-fault-header",
        action="store_true",
        help=f"a request's {FAULT_HEADER} header chooses its fault (for tests; off: the header is ignored)",
    )
    parser.add_argument("--answers", type=Path, help="a manifest.csv whose 'answer' column is used")
    parser.add_argument("--api-key-env", default="", help="require the key held by this environment variable")
    args = parser.parse_args(argv)
    try:
        profile = get_compute_profile(args.profile)
        if args.network:
            get_profile(args.network)
        answers = _answers(args.answers)
    except (ValueError, OSError, KeyError) as exc:
        print(f"cloud_emulator: {exc}", file=sys.stderr)
        return 2
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    if args.api_key_env and not key:
        print(f"cloud_emulator: the variable {args.api_key_env} is not set", file=sys.stderr)
        return 2
    cloud = EmulatedCloud(
        profile,
        args.host,
        args.port,
        args.model,
        key,
        args.fault,
        answers=answers,
        allow_fault_header=args.allow_fault_header,
    )
    try:
        asyncio.run(serve(cloud, args.network, args.network_port))
    except OSError as exc:
        print(f"cloud_emulator: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
