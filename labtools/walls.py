"""The design's walls (docs/design.md) as tables: which part of the product may import which.

A module's part is the folder it lives in (``pipeline/run/`` is the run, ``stages/`` the stages...), so a new
module is held to its part's allowance the moment it exists; nothing here lists files. The tables are read by
``labtools.house``, which reads the imports, and by ``tests/labtools/test_walls.py``, which holds them.
"""

from __future__ import annotations

ENTRY_POINTS = {
    "pipeline.replay",
    "pipeline.analyze",
    "pipeline.whatif",
    "pipeline.experiment",
    "pipeline.endpoints.cloud.__main__",
    "pipeline.report.__main__",
    "pipeline.offline.__main__",
    "pipeline.serve",
    "pipeline.sweep.__main__",
    "pipeline.endpoints.speech.__main__",
    "pipeline.capacity.sink",
    "pipeline.capacity.__main__",
    "pipeline.acoustic.__main__",
    "pipeline.acoustic.run",  # `python -m pipeline.acoustic run`: its arguments, the sound devices, the measurement
    "pipeline.interop.fault_inside",  # one fault case inside the namespace made for it (interop.fault_namespace)
}
# part -> the parts it may import (its own part always allowed)
MAY_USE = {
    "contract": set(),
    "clock": set(),
    # the valid impl names and their settings come from the catalogue; a fixtures folder's truth.csv is a record
    "settings": {"contract", "registry", "catalog", "records"},
    "stages": {"contract", "registry"},
    "registry": {"contract"},  # the contract implementations are registered under; imports none of them
    "catalog": {"contract", "registry", "stages"},  # the one part that imports the implementations
    "run": {"contract", "clock", "settings", "stages", "registry", "catalog", "tracing", "names", "endpoints", "fleet"},
    "fleet": {"contract", "clock", "stages", "tracing"},  # arrivals, the shared model's scheduler, background work
    "tracing": {"contract", "names", "records"},  # records: a trace file is appended as every record file is
    "analysis": {"names", "records"},
    "names": set(),
    # the entry points' shared helpers (run ids, the model cache, quiet native telemetry, saying): a command's
    # part, which only entry points use (tests/labtools/test_walls.py), so no command imports another
    "cli": {"settings"},  # the default model cache
    # every record the lab writes to disk (bench.csv, segments.csv, paths.csv, steps.csv, capacity.json,
    # crossover.json, the acoustic rows): its schema with units, its one writer and its one reader
    "records": set(),
    "report": {"analysis", "names", "records"},
    "endpoints": {"contract"},
    # the speech services run the configured stages, through the registry only, and trace each request;
    # they are served as the other endpoints are (``pipeline.endpoints.serving``)
    "speech": {"contract", "clock", "settings", "registry", "catalog", "tracing", "names", "endpoints"},
    "offline": {"settings"},
    # the xiaozhi wire in three rooms: device -> wire <- server. The wire knows neither end; the ends never know
    # each other; each end runs the run's turn (the single timing wrapper, its link) over the wire
    "transport": set(),  # the map alone
    "transport.wire": {"contract"},
    # endpoints: the limits every listener keeps (endpoints.doors), which the OTA's HTTP and the doors share
    "transport.server": {"contract", "clock", "run", "tracing", "transport.wire", "endpoints"},
    # acoustic: its speaker and its user's voice into sound devices (transport/device/speaker.py)
    "transport.device": {"contract", "clock", "run", "tracing", "endpoints", "transport.wire", "acoustic"},
    # plans points from the settings, runs each as a replay's plan written as its command line, reads its rows back
    "sweep": {"settings", "analysis", "plan", "records"},
    # runs servers the lab did not write and the lab's own entry points as processes, reads their traces back;
    # report: a soak's windows in capacity.md as the report shows them (interop.ramp_table)
    "interop": {"settings", "endpoints", "analysis", "names", "records", "report"},
    # ramps devices against a server step by step: each step a replay run (its plan, its devices), read back
    "capacity": {
        *("contract", "clock", "settings", "run", "fleet", "tracing", "analysis", "names", "records"),
        *("transport.device", "transport.wire", "transport.server", "plan"),
        "endpoints",  # a server process tree's CPU, read from /proc as the turn's load probe reads it (load)
    },
    # measures a recording from its sound alone: the questions' audio (settings), their end of speech by the
    # run's own VAD (run), the contract's frame format; never a server, a trace or the report; plays and records
    # through the sound card (sound.py, run.py)
    "acoustic": {"contract", "settings", "run", "records"},
    # a replay run's plan (what it is made from, typed and checked), its preparation and its making: what the
    # replay does between its command line and its turns, for every command that starts a run
    "plan": {
        *("contract", "clock", "settings", "registry", "run", "tracing", "analysis", "endpoints", "fleet"),
        *("offline", "transport.device", "records"),
    },
}


# entry point -> the parts it may import: a command wires parts together, but only the parts its job
# needs (reading traces needs analysis, never the report; the report's command, never the run)
ENTRY_MAY_USE = {
    "pipeline.capacity.sink": {"transport.wire"},  # a server that answers hello and discards the rest
    "pipeline.interop.fault_inside": {"interop"},
    "pipeline.acoustic.run": {"acoustic", "settings", "records"},
    "pipeline.analyze": {"analysis", "records"},
    "pipeline.whatif": {"analysis", "records"},  # re-timing and its intervals are statistics; paths.csv
    "pipeline.report.__main__": {"report", "analysis", "records"},
    "pipeline.offline.__main__": {"offline"},
    # run: the interleaving conductor (run.interleave); plan: each condition's run as the replay's command line
    "pipeline.experiment": {"analysis", "run", "plan", "records"},
    "pipeline.endpoints.cloud.__main__": {"endpoints"},
    "pipeline.sweep.__main__": {"sweep", "settings", "analysis", "records"},
    "pipeline.capacity.__main__": {"capacity", "cli"},  # cli: quiet_native_telemetry
    "pipeline.acoustic.__main__": {"acoustic", "settings", "records"},
    "pipeline.endpoints.speech.__main__": {
        "speech",
        "settings",
        "tracing",
        "names",
        "clock",
        "endpoints",
        "cli",
        "plan",  # a run id when none is given (plan.run_plan.new_run_id): the services' traces are a run's
    },
    "pipeline.replay": {
        *("contract", "clock", "settings", "registry", "run", "tracing", "analysis", "endpoints", "fleet"),
        *("offline", "transport.device", "cli", "plan", "records"),
        "transport.wire",  # its options' choices: the listen modes and the Opus encoder presets
    },
    "pipeline.serve": {
        "contract",
        "clock",
        "settings",
        "stages",
        "run",
        "tracing",
        "analysis",
        "endpoints",
        "transport.server",
        "transport.wire",
        "names",
        "cli",
        "plan",  # a run id its output folder already holds is refused as the replay refuses it (plan.run_folder)
        "records",  # bench.csv, written as the replay writes it
    },
}


def part(module: str) -> str:
    """The part a module of ours belongs to (``labtools``: the lab's tools, above the product)."""
    if module.split(".")[0] == "labtools":
        return "labtools"  # in no part's allowance: the product never imports the tools that measure it
    if module in ENTRY_POINTS or module in ("pipeline", "stages"):
        return "entry"
    if module == "pipeline.cli":
        return "cli"  # what the entry points share (run ids, the model cache, saying); only they may use it
    if module == "pipeline.events":
        return "contract"
    if module == "pipeline.clock":
        return "clock"
    if module == "pipeline.tracing.names":
        return "names"
    if module == "stages.registry":
        return "registry"
    if module == "stages.catalog":
        return "catalog"
    if module.startswith("stages."):
        return "stages"
    if module.startswith("pipeline.endpoints.speech"):
        return "speech"
    if module.startswith("pipeline.transport.") and module.count(".") >= 3:
        return ".".join(module.split(".")[1:3])  # transport.wire, transport.server, transport.device
    return module.split(".")[1]


def allowed_parts(module: str) -> set[str]:
    """The parts ``module`` may import: its entry point's allowance, or its part's and its own."""
    mine = part(module)
    return ENTRY_MAY_USE.get(module, set()) if mine == "entry" else MAY_USE[mine] | {mine}
