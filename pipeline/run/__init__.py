"""The run: session (rounds of turns), turn, device side, the single timing wrapper, assembly of stages;
``stopping``: a run stopped by SIGTERM or Ctrl-C writes the turns it was in as failed rows."""
