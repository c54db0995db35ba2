"""The xiaozhi device protocol on both ends: messages, Opus, the server gateway and the device emulator."""
