"""How many devices a xiaozhi server holds: a fleet of emulated devices ramped against it, step by step."""
