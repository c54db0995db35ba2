"""The xiaozhi protocol on both ends, in three rooms: device -> wire <- server.

- ``wire/``: what crosses between them and nothing about either end: typed control messages decoded
  once at the edge, binary framing, Opus, UDP packets, MQTT packets and device identity. It imports
  only the contract.
- ``server/``: the lab's server as xiaozhi-esp32-server and the MQTT gateway behave: the front doors
  (WebSocket, MQTT + UDP, OTA), one session per device, one turn per utterance.
- ``device/``: the lab's emulated device as the firmware behaves: its links, its turns, its microphone,
  its MCP tools.

Device and server never import each other; ``tests/labtools/test_walls.py`` holds all three.
"""
