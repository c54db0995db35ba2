"""The server's front doors opened together and served until the process is told to stop.

``pipeline.serve`` (and the capacity server bench) hand over the run's turns and what each door is set to: the
WebSocket door always, the MQTT + UDP door and the OTA endpoint when asked for. Each door says it serves on
stdout (``serving ws://...``: ``processes.READY``, what a supervisor waits for). Serving ends on SIGINT or
SIGTERM, when the process that started it is gone (``orphan_check_s``), or when a finished turn could not be
recorded (``ServedTurns.records_failed``: a full disk), whichever comes first.
"""

from __future__ import annotations

import contextlib

from pipeline.endpoints.serving import until_signalled
from pipeline.run.assembly import open_chat
from pipeline.run.server_run import ServedTurns, first_of
from pipeline.run.session import Run
from pipeline.transport.server.mqtt_front import MqttFrontEnd, MqttFrontSettings
from pipeline.transport.server.ota_endpoint import OTA_PATH, OtaServer, server_url
from pipeline.transport.server.told_address import OtaFront
from pipeline.transport.server.websocket import WebSocketSettings, start_websocket_server


async def serve_until_stopped(
    run: Run,
    turns: ServedTurns,
    settings: WebSocketSettings,
    mqtt: MqttFrontSettings | None = None,
    ota: OtaFront | None = None,
    orphan_check_s: float | None = None,
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(open_chat(run.config, run.engines, run.api_key, {}))
        if settings.session.greeting and settings.session.wake_reply_cache:  # made now, as the real one's file is
            await turns.cached_reply(settings.session.wake_reply, "")
        server = await stack.enter_async_context(await start_websocket_server(settings, turns, run.clock))
        port = server.sockets[0].getsockname()[1] if server.sockets else settings.port
        print(f"serving ws://{settings.host}:{port}{settings.path} (run {run.run_id})", flush=True)
        mqtt_endpoint = ""
        if mqtt is not None:
            gateway = await stack.enter_async_context(MqttFrontEnd(mqtt, turns, run.clock))
            (host, mqtt_port), udp_port = gateway.mqtt_address, gateway.udp_address[1]
            mqtt_endpoint = f"{gateway.public_host}:{mqtt_port}"
            told = f"told as {gateway.public_host}"
            print(f"serving mqtt://{host}:{mqtt_port} with audio on udp://{host}:{udp_port}, {told}", flush=True)
        if ota is not None:
            told_ota = ota.settings(settings, port, mqtt_endpoint, mqtt.signature_key if mqtt else "")
            front = await stack.enter_async_context(OtaServer(told_ota, run.clock, ota.note))
            told = server_url(ota.public_host, front.port, OTA_PATH, "http")
            print(f"serving OTA at {told}, telling devices {front.settings.websocket_url}", flush=True)
        await first_of(until_signalled(orphan_check_s), turns.records_failed.wait())
