"""The xiaozhi wire: what crosses between a device and its server, and nothing about either end.

Typed control messages (``messages``), binary audio framing (``framing``), Opus (``opus``), the
MQTT + UDP transport's encrypted datagrams (``udp``), MQTT packets (``mqtt_packets``) and device
identity (``mqtt_identity``). It imports only the contract, so the device and the server can both
build on it without knowing each other.
"""
