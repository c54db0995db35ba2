"""The world a condition needs around the pipeline: emulated cloud, link emulator, llama-server, probes."""
