"""Writing a record file whole: a file rewritten at once (``replace_whole``: capacity.json, soak.json and their
CSVs), or appended to (a trace file, bench.csv) whole lines or nothing (``append_whole``).

A write the disk cannot take (ENOSPC on a full trace folder, EFBIG, EIO) used to leave the start of a line at
the end of the file and stop the run with a traceback. Here the file is cut back to where the line began, so
every line in it is whole (a reader never meets half a turn), and ``RecordWriteError`` says which file, why,
and that what was written before stands. A process killed mid-write can still leave a partial last line: the
readers skip and name an unreadable line, never read it as a turn.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def replace_whole(path: Path, data: bytes) -> None:
    """``path`` replaced by ``data`` whole: written aside, then renamed over it, so a reader never meets half."""
    aside = path.with_name(path.name + ".part")
    aside.write_bytes(data)
    aside.replace(path)


class RecordWriteError(OSError):
    """A record file that could not take a line: the file, why, and that its earlier lines are intact."""


def append_whole(path: Path, data: bytes) -> None:
    """``data`` (whole lines) appended to ``path``, or the file left as it was and ``RecordWriteError`` raised."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:  # a write may take part of what it is given
                view = view[os.write(fd, view) :]
        except OSError as exc:
            with contextlib.suppress(OSError):  # cutting back frees what the partial line took
                os.ftruncate(fd, start)
            why = exc.strerror or str(exc)
            error = RecordWriteError(
                f"{path}: cannot be written ({why}): the line(s) of {len(data)} bytes were left out whole; "
                "every line written before them stands"
            )
            error.errno = exc.errno
            raise error from None
    finally:
        os.close(fd)
