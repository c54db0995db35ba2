"""The segment kinds a turn's path is split into, in the order a turn passes them, and what each one is.

A path's columns (``paths_csv.PathRow``) and the report's stacked bars follow this order.
"""

from __future__ import annotations

UPLINK = "uplink"
ENDPOINTING = "endpointing"
ASR = "asr"
QUEUE = "queue"
LLM_FIRST_TOKEN = "llm_first_token"
LLM_GENERATION = "llm_generation"
TOOL = "tool"
TTS_FIRST_FRAME = "tts_first_frame"
TTS = "tts"
DOWNLINK = "downlink"
DEVICE_BUFFER = "device_buffer"
PLAYBACK = "playback"
HANDOFF = "handoff"

# each kind, in path order, with what its time is (a path's columns say it in the README's table)
MEANINGS = {
    UPLINK: "a device's turn: its microphone captured the end of speech -> the server had that frame",
    ENDPOINTING: "end of speech -> the VAD's end-point",
    ASR: "the end-point reaches the ASR -> the transcript",
    QUEUE: "a call waiting for the shared model's scheduler",
    LLM_FIRST_TOKEN: "a call's request -> its first token (a remote LLM: the network too)",
    LLM_GENERATION: "first token -> a sentence's cut (or the next cut, or the call's end)",
    TOOL: "a tool's round trip between two calls",
    TTS_FIRST_FRAME: "a sentence reaches the synthesiser -> its first audio frame",
    TTS: "first frame -> the synthesiser done with the sentence (a later sentence may wait on it)",
    DOWNLINK: "a device's turn: the server sent a frame -> the device had it",
    DEVICE_BUFFER: "first frame -> it plays (in one process: handed to the player)",
    PLAYBACK: "a sentence's audio playing (the next may wait for the speaker)",
    HANDOFF: "one stage's output -> the next stage taking it up (queues, the event loop)",
}
SEGMENTS = tuple(MEANINGS)
WORK = frozenset(SEGMENTS) - {HANDOFF}  # kinds that are work of their own (slack counts them)
