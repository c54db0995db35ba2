"""The run: session (rounds of turns), turn, device side, the single timing wrapper, assembly of stages."""
