"""The xiaozhi wire: what crosses between a device and its server, and nothing about either end.

Typed control messages (``messages``), what each end makes of what arrives (``inbound``), binary
audio framing (``framing``), Opus (``opus``; a packet's shape read without decoding it: ``opus_shape``),
the MQTT + UDP transport's encrypted datagrams (``udp``), MQTT packets (``mqtt_packets``), device identity
(``mqtt_identity``), the MCP JSON-RPC payloads of the device's tools (``mcp``), the OTA request and answer
(``ota``) and the two ways a conversation fails (``failures``). Beside it, a telephony voice agent's wire:
Twilio Media Streams' messages (``twilio``), what each end takes of them in what order (``twilio_order``) and
their G.711 mu-law audio (``g711``); and Pipecat's own, its protobuf frames with their RTVI messages
(``pipecat_frames``). It imports only the contract, so the device and the server can both build
on it without knowing each other.
"""
