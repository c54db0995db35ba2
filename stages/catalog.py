"""The catalogue: every registered implementation, gathered from each role's package.

The one module that imports the implementations (through ``stages/<role>/__init__.py``);
the settings take the valid ``impl`` names from here and the run's assembly looks
implementations up here. ``stages/registry.py`` holds the contract they are registered
under and imports none of them, so nothing in ``stages/`` imports in a circle.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

from stages import asr, llm, tts, vad
from stages.registry import Implementation, Registry

# The OpenAI-compatible client's options, which ``[cloud]`` is made of: the settings reach the stages through
# the catalogue only, so the one declaration is handed to them here.
ClientOptions = llm.ClientOptions
# What the LLM stage asks every backend for when nothing says otherwise: the defaults of [llm]'s own keys.
LLM_ROLE_DEFAULTS = llm.LlmSettings()

_ADDED: list[Implementation] = []


@functools.cache
def registry() -> Registry:
    """Every registered implementation (each role's package lists its own)."""
    return Registry((*vad.IMPLEMENTATIONS, *asr.IMPLEMENTATIONS, *llm.IMPLEMENTATIONS, *tts.IMPLEMENTATIONS, *_ADDED))


@contextlib.contextmanager
def registered(*implementations: Implementation) -> Iterator[None]:
    """The catalogue with ``implementations`` added, for as long as the block runs: a test's stand-in for
    the one registration line a new implementation adds to its role's package."""
    _ADDED.extend(implementations)
    registry.cache_clear()
    try:
        yield
    finally:
        del _ADDED[-len(implementations) :]
        registry.cache_clear()
