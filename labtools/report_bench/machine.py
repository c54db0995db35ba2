"""The machine's state beside every figure, and steps timed.

On this shared VM the same work ran a third slower some minutes than others, with nothing else
running, so every measurement prints the load average, the process's peak memory, and the time a
fixed piece of work that no checkout's code takes part in took just before and after it.
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any


def rss_mib() -> float:
    """This process's peak resident size so far, MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def load_text() -> str:
    """The machine's load averages, as printed beside every figure."""
    return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())


def timed(label: str, step: Callable[[], Any]) -> tuple[Any, float]:
    """``step`` run and printed with its time and the peak memory before and after; its result and seconds."""
    before = rss_mib()
    t0 = time.perf_counter()
    result = step()
    seconds = time.perf_counter() - t0
    print(f"  {label:<44}{seconds:8.2f} s   peak RSS {before:7.0f} -> {rss_mib():7.0f} MiB")
    return result, seconds


def python_peak(step: Callable[[], Any]) -> float:
    """The peak of Python allocations while ``step`` runs, MiB (tracemalloc: slower, so never timed)."""
    tracemalloc.start()
    step()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def warm(traces: Path) -> str:
    """The files read once, so the measured run finds them in the page cache; how fast that read was."""
    t0 = time.perf_counter()
    size = 0
    for path in sorted(traces.iterdir()):
        with path.open("rb") as fh:
            while block := fh.read(1 << 24):
                size += len(block)
    seconds = time.perf_counter() - t0
    return f"{size / 2**20:.0f} MiB read beforehand in {seconds:.2f} s ({size / 2**20 / max(seconds, 1e-9):.0f} MiB/s)"


SPEED_LINES = 2000


def speed_check(traces: Path) -> float:
    """Milliseconds for a fixed piece of work that no checkout's code takes part in (the standard library's
    JSON decoding of the first trace lines, and a walk over their spans): this VM's speed at the moment,
    which moved by a third within minutes in this project's measurements. Lower is faster."""
    first = sorted(traces.iterdir())[0]
    with first.open("rb") as fh:
        found = [line for line in itertools.islice(fh, SPEED_LINES) if line.strip()]
    lines = list(itertools.islice(itertools.cycle(found), SPEED_LINES))  # the same work for a smaller file
    t0 = time.perf_counter()
    for line in lines:
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    {a["key"]: a["value"] for a in span.get("attributes", [])}
    return (time.perf_counter() - t0) * 1000


def ready(traces: Path) -> tuple[str, float]:
    """Before a measured run: what was written flushed, the files in the page cache, the machine's speed."""
    os.sync()  # what an earlier run wrote goes to disk now, not during this one
    return warm(traces), speed_check(traces)
