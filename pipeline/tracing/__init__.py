"""Tracing: span names (``names``), the timeline a turn's spans are built from, spans, OTLP JSON, export."""
