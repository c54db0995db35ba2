"""How many devices a xiaozhi server holds: a fleet of emulated devices ramped against it, step by step.

``python -m pipeline.capacity FIXTURES --server URL --steps 1,2,5 --hold 60s --out DIR`` (``__main__``).

- ``ramp_plan``: the ramp's steps, hold and margin (what "holds" means), parsed and checked.
- ``profile``: what the emulated users do (the ``[load]`` table): listen mode, think time, sessions, arrivals.
- ``users``: one step's devices asking questions until the hold is over, traced as every run's turns.
- ``ramp``: step after step, each a replay run of its own, read back, judged and written.
- ``workers``: a step's devices spread over Ray workers (``--workers``), one hold, one trace file, lateness pooled.
- ``step_verdict``: a step's figures from its rows, its verdict (holds, fails, void, too_few) and the knee.
- ``probe``: the server's CPU and RSS during a hold, by PID, from /proc; a soak's per window (descriptors, threads).
- ``soak``: one step held long (``--soak``), watched window by window; ``soak_drift``: whether its figures rose (M20).
- ``machine_speed``: the machine's speed on a fixed probe (JSON, sockets, Opus, ONNX), beside every step and window.
The ramp's records (capacity.json, steps.csv: ``Capacity``, ``Step``, ``StepRow``, their writer and readers)
are ``pipeline.records.ramp_result``; a soak's (soak.json, windows.csv) ``pipeline.records.soak_result``.
Where one shared LLM's silence reaches a device's own (M21 (3)) is ``pipeline.analysis.crossing``, its
record ``pipeline.records.crossover``.
- ``sink``: a server that does nothing costly, to measure the fleet itself (added beside the ramp).
"""
