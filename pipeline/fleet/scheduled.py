"""A chat backend behind the scheduler: it waits for a slot, says how long, then streams as usual."""

from __future__ import annotations

from collections.abc import AsyncIterator

from pipeline.events import CallEnd, QueueWait
from pipeline.fleet.scheduler import Scheduler
from stages.llm import ChatBackend, ChatRequest, Chunk


class ScheduledBackend:
    """Every call of ``inner`` goes through ``scheduler`` in class ``priority``."""

    def __init__(self, inner: ChatBackend, scheduler: Scheduler, priority: str) -> None:
        self.inner, self.scheduler, self.priority = inner, scheduler, priority
        self.model, self.server_address = inner.model, inner.server_address

    async def stream(self, request: ChatRequest) -> AsyncIterator[Chunk]:
        grant = await self.scheduler.acquire(self.priority)
        try:
            yield QueueWait(grant.enqueued_ns, grant.granted_ns, grant.priority)
            async for chunk in self.inner.stream(request):
                if isinstance(chunk, CallEnd):
                    # the model is free once the call ends; the caller may hold this stream open longer
                    self.scheduler.release(grant)
                yield chunk
        finally:
            self.scheduler.release(grant)
