"""Measuring servers the lab did not write: the real xiaozhi-esp32-server and MQTT gateway, run locally."""
