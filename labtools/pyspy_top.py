"""A py-spy raw profile (``py-spy record -f raw``, each line ``frame;frame;...;leaf COUNT``) summarised.

Every thread and every process py-spy sampled counts (``--subprocesses`` adds a ``process PID:"command"``
frame at the root of each stack): a server's work on its VAD thread or in its child processes is its
work too. Two lists: **self**, the function a sample was in (the leaf), and **inclusive**, every function
a sample was under. Inclusive leaves out the scaffolding every sample of a thread sits under (the
interpreter's entry, the event loop's ``run_forever``, a thread's ``run``): each stack counts from below
its last frame in ``DISPATCH`` (the loop's ``_run_once`` and ``Handle._run``, a thread's or a pool
worker's ``run``), so the list names the work rather than the loop that ran it. A stack with no such
frame (a partial one, which ``--nonblocking`` sampling can give) counts whole. A frame is shown as
``function (file.py)``: its line number and folder dropped, so one function is one entry. py-spy leaves
idle threads out (no ``--idle``): the percentages are of the samples of threads that were running, and a
thread waiting in C where py-spy cannot tell it idle (a pool worker's queue, a selector) counts as running.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

DISPATCH = frozenset(
    {"BaseEventLoop._run_once", "Handle._run", "Thread.run", "_WorkItem.run", "BaseProcess.run", "_worker"}
)
PROCESS = "process "


@dataclass
class Profile:
    """Samples counted: in all, by process (its PID), by leaf function (self) and by every function above."""

    total: int = 0
    by_process: Counter[str] = field(default_factory=Counter)
    own: Counter[str] = field(default_factory=Counter)
    under: Counter[str] = field(default_factory=Counter)


def frame_name(entry: str) -> str:
    """``function (path/to/file.py:line)`` as ``function (file.py)``."""
    name, _, where = entry.partition(" (")
    return f"{name} ({where.split(':')[0].rsplit('/', 1)[-1]})" if where else name


def summarise(lines: Iterable[str]) -> Profile:
    """The raw profile's lines counted (blank or malformed lines skipped)."""
    profile = Profile()
    for line in lines:
        stack, _, count_text = line.strip().rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        entries = stack.split(";")
        processes = [e for e in entries if e.startswith(PROCESS)]
        frames = [e for e in entries if not e.startswith(PROCESS)]
        if not frames:
            continue
        profile.total += count
        if processes:
            profile.by_process[processes[-1][len(PROCESS) :].split(":", 1)[0]] += count
        names = [frame_name(f) for f in frames]
        profile.own[names[-1]] += count
        dispatched = [i for i, f in enumerate(frames) if f.partition(" (")[0] in DISPATCH]
        for name in dict.fromkeys(names[dispatched[-1] + 1 :] if dispatched else names):  # once a stack, in order
            profile.under[name] += count
    return profile


def top_lines(profile: Profile, n: int) -> list[str]:
    """The ``n`` functions most samples were in and under, as percentages of all samples."""
    if not profile.total:
        return ["no samples"]
    share = {pid: f"{pid} {100 * c / profile.total:.0f}%" for pid, c in profile.by_process.most_common()}
    lines = [
        f"{profile.total} samples of running threads" + (f"; by process: {', '.join(share.values())}" if share else "")
    ]
    lines += ["self:", *(f"  {100 * c / profile.total:5.1f}%  {f}" for f, c in profile.own.most_common(n))]
    lines += ["inclusive:", *(f"  {100 * c / profile.total:5.1f}%  {f}" for f, c in profile.under.most_common(n))]
    return lines
