"""The link emulator: network profiles, one link direction's release schedule, the TCP proxy."""

from pipeline.endpoints.link.direction import DirectionStats, LinkDirection, sleep_until
from pipeline.endpoints.link.profiles import JITTERS, PROFILES, NetProfile, get_profile, namespace_commands
from pipeline.endpoints.link.proxy import LinkEmulator

__all__ = [
    "JITTERS",
    "PROFILES",
    "DirectionStats",
    "LinkDirection",
    "LinkEmulator",
    "NetProfile",
    "get_profile",
    "namespace_commands",
    "sleep_until",
]
