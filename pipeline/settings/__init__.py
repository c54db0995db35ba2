"""Settings: TOML and command-line settings with config_id, the model registry, the question set and its audio."""
