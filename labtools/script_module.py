"""A script under ``scripts/`` loaded as a module, for a test of the logic the script keeps to itself.

A script is a command (``python scripts/X.py``), and no module imports one by name: ``scripts/`` is on no
path (``labtools.house`` holds every script to that). Logic that scripts share lives in ``labtools``; what
one script alone uses may stay in it, and its test loads the file itself, from its path, with this.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def load_script(name: str) -> ModuleType:
    """``scripts/NAME.py`` as module ``NAME``, its ``if __name__ == "__main__"`` block not run; loaded once,
    a second call gives the same module."""
    path = SCRIPTS / f"{name}.py"
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) == str(path):
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not a script that can be loaded", path=str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before it runs: a dataclass it defines looks its module up there
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
