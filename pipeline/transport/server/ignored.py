"""What a device session does not act on, counted by kind: a closed set of short names, whatever a device sends.

A device chooses a message's ``type`` and ``state`` freely. Counted under those strings, each new one
was a key kept until the turn ended and then written to its span: 190 messages of 1 MB, each of
another type, held 190 MiB on one connection inside the flood guard's allowance. Here a name the
lab knows is counted as itself, anything else under one bucket for its kind (``UNKNOWN_TYPE``,
``listen: unknown state``), and past ``MOST_KINDS`` names every new one goes to ``OTHER_KINDS``.
"""

from __future__ import annotations

import re

from pipeline.transport.wire.messages import Message, Other

# types a device sends that the lab does not act on, counted by name: those the real server handles
# (textMessageHandlerRegistry.py: iot, server, ping); the lab's own come as their message's tag
TOLERATED_TYPES = frozenset({"iot", "server", "ping"})
# the states of the types that have them, as firmware and servers send them
STATES = {"listen": ("start", "stop", "detect"), "tts": ("start", "stop", "sentence_start"), "lab": ("question",)}
UNKNOWN_TYPE = "unknown type"
# more kinds than the session itself names (about a dozen): a backstop, whatever a later edit counts
MOST_KINDS = 32
OTHER_KINDS = "other kinds"
_LONGEST_KIND = 80
_NUMBER = re.compile(r"\d+")


def kind_of(item: Message | Other) -> str:
    """``type`` and ``state`` as one label (``listen:start``) when the lab knows them; a bucket otherwise."""
    if isinstance(item, Other):
        return item.type if item.type in TOLERATED_TYPES else UNKNOWN_TYPE
    name = str(type(item).__struct_config__.tag)
    state = getattr(item, "state", None)
    if state is None:
        return name
    return f"{name}:{state}" if state in STATES.get(name, ()) else f"{name}: unknown state"


def malformed_kind(what: str) -> str:
    """A ``Malformed``'s kind: its words, with each number as N ("header says N payload bytes, ...")."""
    return _NUMBER.sub("N", what)[:_LONGEST_KIND]


class Ignored:
    """Counts by kind, at most ``MOST_KINDS`` names and ``OTHER_KINDS``; ``take`` hands them over and starts afresh."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def count(self, kind: str) -> None:
        if kind not in self.counts and len(self.counts) >= MOST_KINDS:
            kind = OTHER_KINDS
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def take(self) -> dict[str, int]:
        counts, self.counts = self.counts, {}
        return counts
