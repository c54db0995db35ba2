"""The fault matrix's cases against the real xiaozhi-esp32-server, beside the lab's server (issue 42).

The real server runs from a copy of the user's checkout (``real_server.prepare_copy``) with its providers
pointed at the lab's stand-ins, as the interop script's capacity mode points them: the speech services (the
oracle ASR that hears which fixture question an upload is, and the stub TTS) and the emulated cloud. A case's
fault proxy sits where it sits for the lab's server: in front of the cloud (an LLM fault) or of the ASR (a
speech fault). The device asks the fixtures' questions that the real server's shipped end-pointing does not
cut in two (``CUT_BY_ITS_VAD``, as ``docs/tasks/your-server.md`` measured). The real server writes no traces:
what it said is its log's ``-ERROR-`` lines. The MQTT + UDP cases reach it through the real MQTT gateway (a
checkout of github:xinnan-tech/xiaozhi-mqtt-gateway, run as ``interop.gateway`` runs it). A case that needs
what it does not have (several processes, a trace folder of ours, a gateway not given) is not run against it,
and its row says why.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from pipeline.interop import fault_endpoints as stand_ins
from pipeline.interop import gateway, real_server
from pipeline.interop.capacity_mode import fixtures_without
from pipeline.interop.fault_kinds import FaultCase
from pipeline.interop.fault_proxy import FaultProxy
from pipeline.interop.process_group import ProcessGroup, StartedProcess, free_ports

CUT_BY_ITS_VAD = "zh02,zh06,zh08"  # cut in two by its 200 ms of silence at any load: no fault's doing
START_TIMEOUT_S = 120.0
NOT_FOR_REAL = {
    "kill-worker": "the real server runs one process",
    "disk": "the real server writes no traces of ours to fill a disk with",
}
NO_GATEWAY = "MQTT + UDP reaches the real server through its MQTT gateway: give --gateway"
# the device's own hint of which fixture question it asks (``{"type": "lab", ...}``): the real server knows no
# such message and logs an ERROR for each, one a turn, which says nothing of the fault
LAB_HINT = '"type":"lab"'
_LOG_HEAD = re.compile(r"^\d{6} [\d:]+\[[^\]]*\]\[([^\]]*)\]-ERROR-")  # loguru: time, version, module


def why_not(case: FaultCase) -> str:
    """Why ``case`` is not run against the real server ("" when it is)."""
    if case.transport == "mqtt" and not case.real_gateway:
        return NO_GATEWAY
    return NOT_FOR_REAL.get(case.fault, "")


def fixtures_of(case: FaultCase, folder: Path, root: Path) -> Path:
    """The questions the case's device asks: the repository's fixtures, or for the real server those its
    end-pointing leaves whole (written into the case's folder)."""
    fixtures = root / stand_ins.FIXTURES
    if case.server != "real":
        return fixtures
    return fixtures_without(fixtures, CUT_BY_ITS_VAD, folder / "fixtures")


@dataclass(frozen=True, slots=True)
class RealSide:
    """The real server of one case: its copy, the interpreter it runs under, its WebSocket port, and where its
    device connects (the server, or the MQTT gateway in front of it, with the key the gateway checks)."""

    python: Path
    copy: Path
    ws_port: int
    device_url: str
    device_env: dict[str, str]

    def start(self, group: ProcessGroup, name: str) -> StartedProcess:
        return real_server.start(group, self.python, self.copy, self.ws_port, name, START_TIMEOUT_S)


def real_side(
    case: FaultCase,
    group: ProcessGroup,
    folder: Path,
    ports: tuple[int, int, int, int],
    root: Path,
    stack: contextlib.ExitStack,
) -> tuple[RealSide, FaultProxy | None, list[StartedProcess]]:
    """The stand-ins listening, the case's proxy in front of one, and the server's copy written; ``ports``:
    the server's WebSocket and HTTP ports, the cloud's, the speech services'."""
    ws, http, cloud_port, speech_port = ports
    cloud, speech = stand_ins.cloud(group, cloud_port, root), stand_ins.speech(group, speech_port, folder, root)
    proxy = None
    if case.fault in ("llm", "speech"):
        proxy = stack.enter_context(FaultProxy(cloud_port if case.fault == "llm" else speech_port))
    llm = proxy.port if proxy is not None and case.fault == "llm" else cloud_port
    asr = proxy.port if proxy is not None and case.fault == "speech" else speech_port
    services = real_server.Services(
        f"http://127.0.0.1:{llm}/v1",
        "emulated-cloud",
        f"http://127.0.0.1:{asr}/v1/audio/transcriptions",
        f"http://127.0.0.1:{speech_port}/v1/audio/speech",
        api_key="lab-loopback",
        voice="lab",
    )
    copy = real_server.prepare_copy(Path(case.real_folder), folder / "xiaozhi-server", services, ws, http)
    url, env, started = f"ws://127.0.0.1:{ws}/xiaozhi/v1/", {}, [cloud, speech]
    if case.transport == "mqtt":
        mqtt, key, front = _gateway(case, group, folder, url)
        url, env = f"mqtt://127.0.0.1:{mqtt}", {"MQTT_SIGNATURE_KEY": key}
        started.append(front)
    return RealSide(Path(case.real_python), copy, ws, url, env), proxy, started


def _gateway(case: FaultCase, group: ProcessGroup, folder: Path, ws_url: str) -> tuple[int, str, StartedProcess]:
    """The real MQTT gateway in front of the real server, as the interop script runs it: its MQTT port, the key
    it checks devices' passwords with, and its process. It is started before the server is (its WebSocket to the
    server opens at each device's hello)."""
    ports = gateway.GatewayPorts(*free_ports(3))
    key = gateway.signature_key()
    # the real server tells the gateway's connections from a device's by this query (core/connection.py)
    copy = gateway.prepare_copy(
        Path(case.real_gateway), folder / "gateway", f"{ws_url}?from=mqtt_gateway", ports, key, group
    )
    return ports.mqtt, key, gateway.start(group, copy, ports, "gateway")


def server_said(logs: Path, most: int = 3) -> list[str]:
    """Each real server log's ``-ERROR-`` lines (but those about the lab's hint), by module and message with numbers
    folded, with counts."""
    said = []
    for log in sorted(logs.glob("server*.log")):
        counts: Counter[str] = Counter()
        first: dict[str, str] = {}
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            head = _LOG_HEAD.match(line)
            if head is None or LAB_HINT in line:
                continue
            text = f"{head.group(1)}: {line[head.end() :].strip()}"
            folded = re.sub(r"\d+(\.\d+)?", "#", text)
            first.setdefault(folded, text)
            counts[folded] += 1
        shown = "; ".join(f"{first[k][:120]} (x{n})" for k, n in counts.most_common(most))
        said.append(f"{log.stem}: {sum(counts.values())} ERROR line(s)" + (f": {shown}" if shown else ""))
    return said
