"""Section 2c's default what-ifs: the changes a reader asks first, chosen so that the run can answer them.

A fixed change in ms can ask for the impossible (a first token 100 ms sooner where it took 83 ms),
so the defaults are relative: the LLM's first token 25 % sooner, and the same for the largest
segment on the silence's path where that is another one. A round trip more is asked only of a
condition whose LLM was reached over a network (in-process there is none); another condition's LLM
only where that condition was measured. What is left out is said, with the reason, never dropped
silently.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from pipeline.analysis.path.graph import TurnGraph
from pipeline.analysis.retiming import NETWORK_RTT, SETTABLE, Change, parse_change
from pipeline.records.path import LLM_FIRST_TOKEN
from pipeline.report.conditions import title

RELATIVE_PERCENT = 25  # a change every measured segment can take (never shorter than nothing)
FIRST_TOKEN = f"llm.first_token=-{RELATIVE_PERCENT}%"
RTT = "network.rtt=+100ms"
# the condition whose LLM each one's turns are re-timed with: the cloud against the device
SWAP_WITH = {"A": "B", "B": "A", "B'": "A"}
# the segment kind -> the name ``--set`` knows it by (the first name for it: not network.rtt's)
SETTABLE_NAME = {segment: name for name, segment in reversed(SETTABLE.items()) if name != NETWORK_RTT}


@dataclass(frozen=True, slots=True)
class WhatIf:
    """One what-if the section asks of every condition: changes, or another condition's LLM."""

    name: str  # as a reader reads it
    changes: tuple[Change, ...]
    other: str | None = None  # the condition whose LLM is swapped in


@dataclass(frozen=True, slots=True)
class Defaults:
    """The what-ifs asked of a condition, and those left out with why."""

    asked: list[WhatIf]
    left_out: list[str] = field(default_factory=list)


def defaults(label: str, graphs: Sequence[TurnGraph], ranked: Sequence[str], measured: Collection[str]) -> Defaults:
    """The what-ifs for condition ``label`` whose sampled turns are ``graphs``; ``ranked``: the segment kinds on
    their silence's paths, largest share first; ``measured``: the conditions with measured successful turns."""
    out = Defaults([WhatIf(f"LLM first token -{RELATIVE_PERCENT} %", (parse_change(FIRST_TOKEN),))])
    largest = next((kind for kind in ranked if kind in SETTABLE_NAME), None)
    if largest is not None and largest != LLM_FIRST_TOKEN:
        name = SETTABLE_NAME[largest]
        change = parse_change(f"{name}=-{RELATIVE_PERCENT}%")
        out.asked.append(WhatIf(f"{name} -{RELATIVE_PERCENT} % (the silence's largest segment)", (change,)))
    if any(g.remote_llm for g in graphs):  # where some turns' LLM was in-process, the refusal names them
        out.asked.append(WhatIf("network RTT +100 ms", (parse_change(RTT),)))
    else:
        out.left_out.append("network RTT +100 ms: the LLM ran in-process, there is no network on its path")
    other = SWAP_WITH.get(label, "A" if label != "A" else None)
    if other is not None and other in measured:
        out.asked.append(WhatIf(f"the LLM of {title(other)}", (), other))
    elif other is not None:
        out.left_out.append(f"the LLM of {title(other)}: {title(other)} has no measured successful turn here")
    return out
