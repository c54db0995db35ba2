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


@dataclass(slots=True)
class SequenceCheck:
    """Counts what a turn's packets did: received, lost (never came), late (came after a newer one)."""

    received: int = 0
    lost: int = 0
    late: int = 0
    duplicate: int = 0
    _expected: int | None = None
    _missing: set[int] | None = None

    def accept(self, sequence: int) -> bool:
        """Whether to play this packet: only the newest so far is."""
        missing = self._missing if self._missing is not None else set()
        self._missing = missing
        if self._expected is None or sequence >= self._expected:
            if self._expected is not None and sequence > self._expected:
                missing.update(range(self._expected, sequence))
                self.lost += sequence - self._expected
            self._expected = sequence + 1
            self.received += 1
            return True
        if sequence in missing:  # it was counted lost; it is late instead, and still not played
            missing.discard(sequence)
            self.lost -= 1
            self.late += 1
        else:
            self.duplicate += 1
        return False

    def next_turn(self) -> SequenceCheck:
        """Fresh counts for the next turn; the order carries on (sequence numbers run across turns)."""
        return SequenceCheck(_expected=self._expected)
