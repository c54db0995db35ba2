"""Loads a FunASR model folder (VAD or ASR) through ``funasr.AutoModel``, never reaching for a model hub."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any


def load_automodel(model_dir: Path, **kwargs: Any) -> Any:
    """``funasr.AutoModel`` on a local folder, quietly, never reaching for a model hub."""
    if not model_dir.is_dir() or not (model_dir / "config.yaml").is_file():
        raise ValueError(f"{model_dir}: not a FunASR model folder (no config.yaml)")
    try:
        from funasr import AutoModel
    except ImportError:
        raise ValueError("FunASR is not installed: pip install 'voice-latency-lab[funasr]'") from None
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            return AutoModel(
                model=str(model_dir), disable_update=True, device="cpu", disable_pbar=True, disable_log=True, **kwargs
            )
        except Exception as exc:  # FunASR raises many types for bad folders
            raise ValueError(f"{model_dir}: FunASR cannot load this model ({type(exc).__name__}: {exc})") from None
