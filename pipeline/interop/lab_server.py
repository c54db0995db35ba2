"""Settings that put the lab's own server (``pipeline.serve``) on the same services as a real one.

Side by side with xiaozhi-esp32-server, ``pipeline.serve`` gets the same speech services
(``[asr]`` and ``[tts]`` impl ``service``), the same LLM through the same relay (``[llm]`` impl
``openai``), and Silero with the real server's end-pointing rule (``[vad]`` profile
``xiaozhi-server``), so what differs between the two rows is the servers themselves: their
prompts, hand-offs, sentence splitting, Opus encoding and pacing.
"""

from __future__ import annotations

import json


def lab_config(
    condition: str, relay_url: str, asr_url: str, tts_url: str, model: str, vad_wait_ms: int | None = None
) -> str:
    """The TOML text; ``vad_wait_ms``: the profile's silence (the real server's ``min_silence_duration_ms``),
    None for the profile's own (the real server's shipped value)."""
    q = json.dumps  # a TOML basic string is a JSON string for these (ASCII URLs and names)
    wait = "" if vad_wait_ms is None else f"\n[vad.xiaozhi_server]\nsilence_ms = {vad_wait_ms}\n"
    return f"""# written by scripts/interop/xiaozhi_server.py: the lab's server on the interop run's services
[run]
condition = {q(condition)}
clock = "real"
pacing = "realtime"
turn_timeout_s = 60

[vad]
impl = "silero"
model = "silero-vad"
profile = "xiaozhi-server"
{wait}
[asr]
impl = "service"
url = {q(asr_url)}

[llm]
impl = "openai"
mode = "single"
model = {q(model)}
tools = false
max_tokens = 128

[cloud]
base_url = {q(relay_url)}
read_timeout_s = 120

[tts]
impl = "service"
url = {q(tts_url)}
"""
