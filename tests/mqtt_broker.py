"""A real Mosquitto broker for the test that asks (``pipeline.endpoints.broker``), or a clear failure."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.endpoints.broker import BrokerError, local_broker, mosquitto_binary


@contextlib.contextmanager
def mosquitto(_folder: Path) -> Iterator[int]:
    if mosquitto_binary() is None:
        pytest.fail("mosquitto is not installed: `make system` (part of `make test`) installs it")
    try:
        with local_broker() as port:
            yield port
    except BrokerError as exc:
        pytest.fail(str(exc))
