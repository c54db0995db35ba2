"""The emulated cloud: compute model, answers, server, faults, and the endpoint a run of condition A talks to."""

from pipeline.endpoints.cloud.answers import (
    ANSWERS,
    TOOL_DONE,
    BadRequest,
    StreamPlan,
    pick_answer,
    pick_tool,
    plan_reply,
)
from pipeline.endpoints.cloud.chat_server import EmulatedCloud
from pipeline.endpoints.cloud.compute import COMPUTE_PROFILES, ComputeProfile, Slots, get_compute_profile
from pipeline.endpoints.cloud.endpoint import Endpoint, serve_endpoint
from pipeline.endpoints.cloud.faults import FAULT_HEADER, FAULTS

__all__ = [
    "ANSWERS",
    "COMPUTE_PROFILES",
    "FAULTS",
    "FAULT_HEADER",
    "TOOL_DONE",
    "BadRequest",
    "ComputeProfile",
    "EmulatedCloud",
    "Endpoint",
    "Slots",
    "StreamPlan",
    "get_compute_profile",
    "pick_answer",
    "pick_tool",
    "plan_reply",
    "serve_endpoint",
]
