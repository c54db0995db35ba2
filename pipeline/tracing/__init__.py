"""Tracing: span names (``names``), the timeline a turn's spans are built from, span records, OTLP JSON, export."""
