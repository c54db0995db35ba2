"""The cited xiaozhi voice-chain breakdown (``docs/reference/cited.md``), with its provenance.

Cited figures are never measured here (METHOD M12): they appear only in their own table,
labelled cited, with the caveat below, and never fill a measured cell.
"""

from __future__ import annotations

CONFIGURATION = "Go server + FunASR + Qwen2.5-72B-Instruct (cloud API) + CosyVoice, as cited in the design document"

BREAKDOWN = (
    ("VAD (end-point detection)", "200-400 ms"),
    ("ASR", "500-800 ms"),
    ("LLM first token", "300-600 ms"),
    ("LLM sentence complete", "800-1500 ms"),
    ("TTS first frame", "200-400 ms"),
    ("network + decode", "50-150 ms"),
    ("end to end", "1000-1300 ms (range 800-1800 ms)"),
)

CAVEAT = (
    "Provenance: the end-to-end claim traces to the Go xiaozhi server project "
    "(hackers365/xiaozhi-esp32-server-golang, doc/delay_test.md, 2025-05: FunASR, qwen2.5-72b-instruct via API, "
    "CosyVoice; eight log lines of 975-1394 ms). Its clock starts when the VAD silence window has already expired "
    "and stops at the first TTS frame the server sends: it is server-side only and excludes the VAD wait, the "
    "uplink, the downlink, decoding and playback, so it is not comparable with this report's whole-turn time. "
    "The per-stage ranges could not be traced to a source."
)
