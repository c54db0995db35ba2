"""The project at a git ref, checked out beside this one for a bench's "before" run (``--before REF``).

A ``git worktree add --detach`` into a folder the caller owns (a temporary one), removed when the
``with`` ends, whatever way it ends: the bench then runs that checkout's code from its folder.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def checkout_at(root: Path, ref: str, folder: Path, label: str = "baseline") -> Iterator[Path]:
    """The project of ``root`` at git ref ``ref``, checked out in ``folder`` (a worktree, removed afterwards);
    one line names the ref, its commit and the folder, as ``label: REF (COMMIT), checked out in FOLDER``."""
    git = ["git", "-C", str(root)]
    subprocess.run([*git, "worktree", "add", "--detach", "--quiet", str(folder), ref], check=True)
    try:
        commit = subprocess.run([*git, "rev-parse", "--short", ref], capture_output=True, text=True, check=True)
        print(f"{label}: {ref} ({commit.stdout.strip()}), checked out in {folder}")
        yield folder
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(folder)], check=False)
