"""Stage implementations: each one consumes and yields ``pipeline.events`` and never reads the clock."""
