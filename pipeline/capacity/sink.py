"""A xiaozhi WebSocket server that does nothing costly: it answers the device's hello and discards the rest.

What a load generator runs against to measure itself: a fleet that cannot hold its own schedule
against this server measures itself, not a server. The hello is answered as the lab's server
answers it (``transport.server.session``: the device's audio parameters echoed, a session id), so
the device link accepts it; audio frames are only counted, every other message is dropped.

    python -m pipeline.capacity.sink --port 8765 [--host 127.0.0.1]

prints its URL when it listens, and on SIGTERM or SIGINT the frames it received, then exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import uuid

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from pipeline.transport.wire.failures import ProtocolError
from pipeline.transport.wire.messages import Hello, check_audio_params, decode, encode

PATH = "/xiaozhi/v1/"


class Sink:
    """Answers every hello, counts binary frames; nothing else."""

    def __init__(self) -> None:
        self.frames = 0
        self.sessions = 0

    async def handle(self, ws: ServerConnection) -> None:
        session_id = uuid.uuid4().hex
        try:
            async for message in ws:
                if isinstance(message, bytes):
                    self.frames += 1
                else:  # control messages are few (hello, listen, lab): reading each is cheap
                    answer = self.answer(message, session_id)
                    if answer:
                        await ws.send(answer)
        except ConnectionClosed:
            return

    def answer(self, message: str, session_id: str) -> str:
        """To a hello, the server's: the device's audio parameters echoed, as the lab's server does; to
        anything else, "" (nothing is said). A hello whose audio the lab would refuse is answered without them."""
        try:
            hello = decode(message)
        except ProtocolError:
            return ""
        if not isinstance(hello, Hello):
            return ""
        try:
            params = check_audio_params(hello)
        except ProtocolError:
            params = None
        self.sessions += 1
        return encode(Hello(transport="websocket", audio_params=params, session_id=session_id))


async def run(host: str, port: int) -> Sink:
    """Serve until SIGTERM or SIGINT; the sink, with what it counted."""
    sink, stop = Sink(), asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with serve(sink.handle, host, port, compression=None, max_size=2**20) as server:
        bound = server.sockets[0].getsockname()[1]
        print(f"ws://{host}:{bound}{PATH}", flush=True)
        await stop.wait()
    return sink


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.capacity.sink", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True, help="TCP port to listen on (0: any free one)")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port {args.port}: 0 to 65535")
    sink = asyncio.run(run(args.host, args.port))
    print(f"sessions: {sink.sessions} frames received: {sink.frames}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
