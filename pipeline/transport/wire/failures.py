"""The two ways a conversation over the wire goes wrong, shared by both ends."""

from __future__ import annotations


class ProtocolError(ValueError):
    """Something the protocol does not allow arrived; the text says what was wrong."""


class ChannelGone(Exception):
    """The other end is gone: nothing more can be sent or received on this connection."""
