"""The xiaozhi UDP audio packet: a 16-byte header, AES-128-CTR encrypted Opus, and sequence checks.

Header (big-endian): type 0x01, flags, payload length (u16), ssrc (u32), timestamp (u32),
sequence (u32). The server's hello gives a key and a 16-byte nonce; each packet's header is that
nonce with its length, timestamp and sequence filled in, and serves as the packet's CTR counter
block, so no two packets share a keystream. The receiver keeps the firmware's rule: a packet
older than the newest one seen is not played; it is counted, as are the gaps it leaves.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

HEADER = struct.Struct(">BBHIII")
PACKET_TYPE = 0x01


class PacketError(ValueError):
    """A datagram that is not an audio packet of this session."""


@dataclass(frozen=True, slots=True)
class AudioPacket:
    """One UDP audio packet, opened: its header's ssrc, timestamp and sequence, and the Opus it carries."""

    ssrc: int
    timestamp: int
    sequence: int
    payload: bytes


class PacketCrypto:
    """Seals and opens one session's packets with the key and nonce its hello announced."""

    def __init__(self, key: bytes, nonce: bytes) -> None:
        if len(key) != 16 or len(nonce) != 16:
            raise PacketError("AES-128-CTR needs a 16-byte key and a 16-byte nonce")
        self.key, self.nonce = key, nonce
        self.ssrc = struct.unpack_from(">I", nonce, 4)[0]

    def seal(self, payload: bytes, timestamp: int, sequence: int) -> bytes:
        header = HEADER.pack(PACKET_TYPE, self.nonce[1], len(payload), self.ssrc, timestamp & 0xFFFFFFFF, sequence)
        encryptor = Cipher(algorithms.AES(self.key), modes.CTR(header)).encryptor()
        return header + encryptor.update(payload) + encryptor.finalize()

    def open(self, datagram: bytes) -> AudioPacket:
        if len(datagram) < HEADER.size:
            raise PacketError(f"a datagram of {len(datagram)} bytes is shorter than the 16-byte header")
        kind, _flags, size, ssrc, timestamp, sequence = HEADER.unpack_from(datagram)
        if kind != PACKET_TYPE:
            raise PacketError(f"packet type {kind:#04x} is not audio (0x01)")
        if ssrc != self.ssrc:
            raise PacketError(f"ssrc {ssrc:#010x} is not this session's")
        body = datagram[HEADER.size :]
        if size != len(body):
            raise PacketError(f"header says {size} payload bytes, the datagram holds {len(body)}")
        decryptor = Cipher(algorithms.AES(self.key), modes.CTR(datagram[: HEADER.size])).decryptor()
        return AudioPacket(ssrc, timestamp, sequence, decryptor.update(body) + decryptor.finalize())


def ssrc_of(datagram: bytes) -> int | None:
    """The ssrc a datagram claims, to route it to its session before opening it."""
    return struct.unpack_from(">I", datagram, 4)[0] if len(datagram) >= HEADER.size else None


# A packet further ahead of the newest than this is no audio that was lost but a forged or broken header:
# 4,096 packets are four minutes of 60 ms audio, more than any stall a session survives
MAX_GAP = 1 << 12
# how far below the newest packet a late one is still told from a duplicate (a bit per packet)
WINDOW = 256
_WINDOW_MASK = (1 << WINDOW) - 1


@dataclass(slots=True)
class SequenceCheck:
    """Counts what a turn's packets did: received, lost (never came), late (came after a newer one),
    duplicate, stale (older than the window, so neither), implausible (too far ahead: dropped, and it
    moves nothing). Memory and time per packet are bounded whatever the sequence numbers say."""

    received: int = 0
    lost: int = 0
    late: int = 0
    duplicate: int = 0
    stale: int = 0
    implausible: int = 0
    _expected: int | None = None
    _missing: int = 0  # bit i: sequence ``_expected - 1 - i`` has not come

    def ahead(self, sequence: int) -> int | None:
        """How far past the next expected packet this one is (0: the next, negative: behind); None before any."""
        return None if self._expected is None else sequence - self._expected

    def accept(self, sequence: int) -> bool:
        """Whether to play this packet: only the newest so far is (the firmware's rule)."""
        if self._expected is None:
            self._expected = sequence + 1
            self.received += 1
            return True
        gap = sequence - self._expected
        if gap > MAX_GAP:
            self.implausible += 1
            return False
        if gap >= 0:
            self.lost += gap
            self._missing = ((self._missing << (gap + 1)) | (((1 << gap) - 1) << 1)) & _WINDOW_MASK
            self._expected = sequence + 1
            self.received += 1
            return True
        behind = -gap - 1  # bit index of this sequence
        if behind >= WINDOW:
            self.stale += 1
        elif self._missing >> behind & 1:  # it was counted lost; it is late instead, and still not played
            self._missing &= ~(1 << behind)
            self.lost -= 1
            self.late += 1
        else:
            self.duplicate += 1
        return False

    def next_turn(self) -> SequenceCheck:
        """Fresh counts for the next turn; the order carries on (sequence numbers run across turns)."""
        return SequenceCheck(_expected=self._expected, _missing=self._missing)
