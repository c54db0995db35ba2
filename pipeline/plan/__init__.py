"""A replay run's plan: what the run is made from, typed and checked (``RunPlan``), and what it takes to
prepare it (``prepare``: settings, questions, engines, its identity) and make it (``make_run``).

The replay builds a plan from its command line; the capacity ramp builds one per step, the sweep and the
experiment one per child process, which they start with the plan written back as the replay's command line.
None of them parses another's arguments.

- ``run_plan``: ``RunPlan`` and its ``DeviceOptions``, refused when built where they ask the impossible, and
  ``RunPlan.config()``: the settings read and checked against what the plan asks of them.
- ``prepare``: ``prepare(plan, env) -> Prepared`` (the secrets the plan names read from ``env`` here),
  ``make_run``, ``device_of`` and ``identify_device`` (a device run's identity), ``device_id``.
- ``notices``: what a prepared run says before it starts: its warnings and its announcement.
- ``run_folder``: a run id its output folder already holds is refused (``RunExists``) unless appended to.
- ``command_line``: which replay option sets which setting (``overrides_from``), and a plan written back as
  the replay's command line (``replay_argv``).
"""
