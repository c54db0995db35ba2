"""The xiaozhi MQTT gateway (github:xinnan-tech/xiaozhi-mqtt-gateway, node), run from a user's checkout.

The gateway is an MQTT server for devices and a WebSocket client of one chat server: each
device hello opens a WebSocket to the server named in ``config/mqtt.json`` (its
``production.chat_servers``), and audio goes between UDP and that WebSocket. It reads its
ports and its signature key from ``.env`` (dotenv) in its folder, so, as with the real server,
it runs from a copy under the run's folder with its npm packages installed there. Its MQTT,
UDP and admin sockets bind every interface (app.js: ``mqttServer.listen(port)``,
``udpServer.bind(port)``, ``app.listen(adminPort)`` name no host); nothing here can change that
without changing its code, so a run on a shared network should be behind a firewall.
"""

from __future__ import annotations

import json
import secrets
import shutil
import string
from dataclasses import dataclass
from pathlib import Path

from pipeline.interop.process_group import InteropError, ProcessGroup, StartedProcess


@dataclass(frozen=True, slots=True)
class GatewayPorts:
    """The ports the real MQTT gateway listens on: MQTT, UDP and its admin API."""

    mqtt: int
    udp: int
    admin: int


def gateway_folder(checkout: Path) -> Path:
    if not (checkout / "app.js").is_file() or not (checkout / "package.json").is_file():
        raise InteropError(f"{checkout}: not a xiaozhi-mqtt-gateway checkout (no app.js and package.json in it)")
    return checkout


def signature_key() -> str:
    """A throwaway key the gateway accepts (app.js: 8+ characters, upper and lower case)."""
    alphabet = string.ascii_letters + string.digits
    return "Lab" + "".join(secrets.choice(alphabet) for _ in range(21)) + "x"


def prepare_copy(
    checkout: Path, target: Path, chat_server: str, ports: GatewayPorts, key: str, processes: ProcessGroup
) -> Path:
    """A copy of the gateway with its packages, ``.env`` and ``config/mqtt.json`` for this run."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise InteropError("the MQTT gateway needs node and npm (Debian: apt-get install nodejs npm)")
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(checkout, target, ignore=shutil.ignore_patterns("node_modules", ".git", ".env", "mqtt.json"))
    try:
        processes.run(
            "npm-install", ["npm", "install", "--omit=dev", "--no-audit", "--no-fund"], cwd=target, timeout_s=900
        )
    except InteropError as exc:
        raise InteropError(f"the gateway's npm packages cannot be installed: {exc}") from None
    env = {
        "MQTT_PORT": ports.mqtt,
        "UDP_PORT": ports.udp,
        "PUBLIC_IP": "127.0.0.1",
        "API_PORT": ports.admin,
        "MQTT_SIGNATURE_KEY": key,
    }
    (target / ".env").write_text("".join(f"{k}={v}\n" for k, v in env.items()), encoding="utf-8")
    config = {"production": {"chat_servers": [chat_server]}, "debug": False, "max_mqtt_payload_size": 8192}
    (target / "config").mkdir(exist_ok=True)
    (target / "config" / "mqtt.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return target


def start(processes: ProcessGroup, copy: Path, ports: GatewayPorts, name: str) -> StartedProcess:
    gateway = processes.start(name, ["node", "app.js"], cwd=copy)
    processes.wait_port(gateway, ports.mqtt, timeout_s=60)
    return gateway
