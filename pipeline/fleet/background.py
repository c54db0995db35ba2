"""Background work that competes with the voice turns for the same model.

A device that summarises the day's notes, or describes what its camera saw, asks the model
for long prompts at its own pace while people talk to it. Every ``period_ms`` a new job
starts (jobs may overlap: a slow model makes them pile up, as on a real device), goes
through the scheduler in the background class and streams its answer to the end. Each job
is recorded (``JobTimeline``), with its error if it failed: a crashing job is one failed
job, never the run's end (METHOD M7).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pipeline.clock import Clock
from pipeline.events import CallEnd, QueueWait, TokenDelta
from pipeline.tracing.timeline import JobTimeline, QueueTiming
from stages.llm import ChatBackend, ChatRequest, LlmError, Message

NOTES = (
    "09:10 kitchen light on. 09:12 kettle started, 3 minutes. 09:20 front door opened and closed. "
    "10:05 washing machine cycle began, 72 minutes. 11:30 living room temperature 23.5 C, humidity 41 %. "
    "12:02 robot vacuum finished the hallway, bin 80 % full. 12:45 a parcel was left at the door. "
    "13:15 the bedroom window was opened; outside temperature 14 C. 14:00 a reminder to call the plumber "
    "about the dripping tap was set. 15:20 the garden sprinkler ran for 10 minutes. 16:40 the oven "
    "preheated to 200 C, then switched off at 17:25. 18:05 motion in the garage while nobody was home."
)
DETECTIONS = (
    "frame 1841, 1280x720: person (0.93) at x=410 y=120 w=180 h=520; dog (0.88) at x=700 y=430 w=210 "
    "h=190; sofa (0.81) at x=20 y=300 w=520 h=330; television (0.77) at x=900 y=110 w=300 h=190; cup "
    "(0.64) at x=610 y=380 w=30 h=40; backpack (0.58) at x=1120 y=500 w=110 h=160; light level low; "
    "the person faces the television; the dog moved 60 px to the left since frame 1811."
)
JOBS = {
    "summarise": ("You summarise a smart home's event log for its owner.", f"Summarise today's events:\n{NOTES}"),
    "vision": (
        "You describe camera scenes for a home assistant.",
        f"Describe the scene and anything unusual:\n{DETECTIONS}",
    ),
}

JobSink = Callable[[JobTimeline], None]


class BackgroundLoad:
    """Starts a job every ``period_ms`` until stopped; each finished job goes to ``on_job``."""

    def __init__(
        self,
        kind: str,
        period_ms: float,
        max_tokens: int,
        backend: Callable[[int], ChatBackend],
        clock: Clock,
        on_job: JobSink,
        temperature: float | None = None,  # asked of every job's call, as of the turns' (``[llm]``)
        seed: int | None = None,
    ) -> None:
        if kind not in JOBS:
            raise ValueError(f"background job {kind!r}: {', '.join(JOBS)}")
        self.kind, self.period_ms, self.max_tokens = kind, period_ms, max_tokens
        self.backend, self.clock, self.on_job = backend, clock, on_job
        self.temperature, self.seed = temperature, seed

    async def run(self) -> None:
        """Start jobs at their times until cancelled; jobs still running then are stopped and recorded."""
        running: set[asyncio.Task[None]] = set()
        index = 0
        try:
            while True:
                task = asyncio.create_task(self._job(index))
                running.add(task)
                task.add_done_callback(running.discard)
                index += 1
                await asyncio.sleep(self.period_ms / 1000)
        finally:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    async def _job(self, index: int) -> None:
        system, prompt = JOBS[self.kind]
        job = JobTimeline(index=index, kind=self.kind, start_ns=self.clock.now_ns(), input_chars=len(prompt))
        messages = (Message("system", system), Message("user", prompt))
        request = ChatRequest(messages, self.max_tokens, temperature=self.temperature, seed=self.seed)
        try:
            await self._stream(job, self.backend(index), request)
        except asyncio.CancelledError:
            job.error_type, job.error_message = "stopped", "the run ended before the job finished"
            raise
        except Exception as exc:  # a crashing job is recorded; the load goes on (M7)
            job.error_type, job.error_message = type(exc).__name__, str(exc) or type(exc).__name__
        finally:
            job.end_ns = self.clock.now_ns()
            self.on_job(job)

    async def _stream(self, job: JobTimeline, backend: ChatBackend, request: ChatRequest) -> None:
        done = False
        async for chunk in backend.stream(request):
            if isinstance(chunk, QueueWait):
                job.queue = QueueTiming(chunk.enqueued_ns, chunk.granted_ns, chunk.priority)
            elif isinstance(chunk, TokenDelta) and job.first_token_ns is None and chunk.text.strip():
                job.first_token_ns = self.clock.now_ns()
            elif isinstance(chunk, CallEnd):
                job.output_tokens, done = chunk.output_tokens, True
                break
        if not done:
            raise LlmError(f"the model ended background job {job.index} without finishing")
