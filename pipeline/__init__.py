"""The voice-pipeline latency lab: orchestration, tracing, replay, analysis and reports."""
