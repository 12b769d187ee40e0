"""The preconditions part of a Scenario: before acting, what the target must be able to
do; when it cannot, the run ends SKIPPED, its run folder saying why (the index lists
it)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.files import write_atomic
from harness.scenario_context import ScenarioContext


class ScenarioSkipped(Exception):
    """The target cannot run this scenario (found before acting): SKIPPED, with why."""


def write_unjudged(
    run_dir: Path, kind: str, name: str, target: str | None, reason: str, verdict="skipped"
) -> dict:
    """The summary of a run that ended without judging: SKIPPED before acting, or
    INCONCLUSIVE when the session was interrupted; why, for the index."""
    summary = {"scenario": kind, "name": name} | ({"target": target} if target else {})
    summary |= {"verdict": verdict, "reason": reason, "requests": 0, "outcomes": {}}
    summary["checks"] = []
    write_atomic(run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary


class Preconditions:
    def __init__(self, ctx: ScenarioContext, run_dir: Path, kind: str, name: str):
        self.ctx, self.run_dir, self.kind, self.name = ctx, run_dir, kind, name
        self.target = ctx.target

    def skip(self, reason: str):
        """End before acting, as SKIPPED: the run folder says why (the index lists it)."""
        write_unjudged(self.run_dir, self.kind, self.name, self.target.name, reason)
        self.ctx.progress.phase(f"SKIPPED: {reason}")
        raise ScenarioSkipped(reason)

    def require(self, what: str, blocker: str | None) -> None:
        """Before acting: SKIPPED, saying why, when the target cannot do `what` (`blocker`:
        the reason a target's own *_blocker() gave, or None)."""
        if blocker:
            self.skip(f"cannot {what} here: {blocker}")

    def require_gpus(
        self,
        surge: int,
        what: str = "the rollout",
        pods: str = "surge pods",
        fix: str = "lower maxSurge or free GPUs",
    ) -> None:
        """Before acting: SKIPPED if the pods the act adds cannot get GPUs (they would stay
        Pending until the scenario timed out)."""
        if surge <= 0:
            return
        free = self.target.free_gpus()
        if free is None:
            return
        have, per_pod = free
        if surge * per_pod > have:
            self.skip(
                f"{what} needs {surge * per_pod} free GPUs ({surge} {pods} x {per_pod}) and "
                f"the schedulable nodes have {have}: {fix}"
            )
