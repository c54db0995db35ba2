"""Measuring servers the lab did not write: the real xiaozhi-esp32-server and MQTT gateway, run locally; and
the lab's own server under faults.

The fault matrix (issue 42): ``fault_cases`` runs a case (``fault_kinds``: what breaks, when) with
``fault_run`` (here) or ``fault_namespace`` (a network and mount namespace of its own, for a cut or a full
disk, where ``fault_inside`` runs it), puts the fault in with ``fault_inject`` (kill -9, nftables, an
endpoint behind ``fault_proxy``), and checks what is left with ``fault_ledger`` (every planned turn in one
row, the traces against bench.csv) and ``fault_leftovers`` (processes, ports, temporary files);
``fault_result`` writes the table; ``fault_endpoints`` starts the stand-ins either server talks to.
``fault_real`` runs the same cases against the real xiaozhi-esp32-server (``real_server``) and
``fault_compare`` puts two matrices side by side.

A third-party voice bot (a Pipecat bot, ``scripts/interop/pipecat_bot.py``) is called over Twilio's wire; its own
log of what it believed (``bot_marks``) is read beside what its caller heard, and its event loop's lag per step of
a ramp (``bot_lag``).
"""
