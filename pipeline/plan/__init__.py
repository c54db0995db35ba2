"""A replay run's plan: what the run is made from, typed and checked (``RunPlan``), and what it takes to
prepare it (``prepare``: settings, questions, engines, its identity) and make it (``make_run``).

The replay builds a plan from its command line; the capacity ramp builds one per step, the sweep and the
experiment one per child process, which they start with the plan written back as the replay's command line
(``command_line.replay_argv``). None of them parses another's arguments.
"""
