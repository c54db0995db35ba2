"""What a prepared run says before it starts: its warnings (said once, never fatal) and its first line."""

from __future__ import annotations

from pipeline.fleet.arrivals import lockstep_warning
from pipeline.plan.prepare import Prepared
from pipeline.run.session import Run
from pipeline.settings.config import Config


def fleet_warnings(cfg: Config, questions: int, remote: bool) -> list[str]:
    """What a many-device run should know before it starts (said once, never fatal)."""
    out = []
    lockstep = lockstep_warning(cfg.fleet.devices, questions)
    if lockstep:
        out.append(lockstep)
    if remote and (cfg.scheduler.concurrency or cfg.background.job != "none"):
        out.append(
            "[scheduler] and [background] act where the model is: give them to pipeline.serve's --config; "
            "this device run ignores them"
        )
    if cfg.fleet.devices > 1 and not remote and cfg.scheduler.concurrency == 0:
        out.append(
            f"{cfg.fleet.devices} devices share the model with no scheduler in front of it: their waits for it "
            "are inside first token, not measured as queue; set [scheduler] concurrency (--concurrency 1)"
        )
    return out


def run_warnings(p: Prepared, api_key: str | None) -> list[str]:
    """What the user should know before the run starts (said once, never fatal)."""
    selected = len(p.questions.questions[: p.cfg.run.limit or None])
    out = [*p.questions.warnings, *fleet_warnings(p.cfg, selected, p.remote is not None)]
    if p.cfg.llm.impl == "openai" and p.cfg.cloud.api_key_env and not api_key:
        out.append(f"{p.cfg.cloud.api_key_env} is not set: every turn will be ok=0, error=LlmMissingApiKey")
    return out


def announcement(run: Run) -> str:
    """The run's first line: what it is and how big."""
    cfg = run.config
    return (
        f"run {run.run_id}: condition {cfg.run.condition}, config {run.config_id}, {len(run.selected())} question(s) "
        f"x {cfg.run.rounds} round(s) x {cfg.fleet.devices} device(s), LLM mode {cfg.llm.mode}, "
        f"pacing {cfg.run.pacing}, clock {run.clock.kind}"
    )
