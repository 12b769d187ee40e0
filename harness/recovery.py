"""The recovery part of a Scenario: the waits after the act, until the target shows the
workload whole again (the desired replicas ready and served, the rollout done, the
queues clear, a killed pod replaced). t_recovered is when it did, or None when it did
not within scenario.recovery_s: the judge reads it."""

from __future__ import annotations

import time

from harness.cluster.target import TargetError
from harness.disruption import Disruption
from harness.scenario_context import ScenarioContext
from harness.timeline import disruption_time


class Recovery:
    def __init__(self, ctx: ScenarioContext, disruption: Disruption):
        self.ctx, self.disruption = ctx, disruption
        self.target, self.cfg, self.progress = ctx.target, ctx.cfg, ctx.progress
        self.wait_for = ctx.wait_for
        self.t_recovered: float | None = None

    def prepare_replicas(self, n: int) -> None:
        """Before the steady state: bring the deployment to n ready replicas."""
        self.target.scale(n)
        self.wait(replicas=n)
        self.t_recovered = None

    def wait_rollout(self) -> None:
        self.wait_for(self.target.rollout_done, self.cfg.scenario.recovery_s, "the rollout")

    def wait(self, replicas: int | None = None, ignoring: tuple[str, ...] = ()) -> None:
        """Wait (up to scenario.recovery_s) for the desired replicas, ready and served; with
        scenario.startup_stall_s, for as long as a replacement's start-up progresses (up
        to settle_s): a recovery later than recovery_s is then measured, not cut off.
        ignoring: pods not counted once terminating (a lost node's stay so until it is back)."""
        n = self.cfg.replicas if replicas is None else replicas
        self.progress.desired = n
        timing = self.cfg.scenario
        ceiling = max(timing.recovery_s, timing.settle_s) if timing.startup_stall_s else None
        try:
            self.target.wait_settled(
                n, ceiling or timing.recovery_s, stall_s=timing.startup_stall_s, ignoring=ignoring
            )
            self.t_recovered = time.time()
            self.target.action("recovered", replicas=n)
        except TargetError:
            self.t_recovered = None

    def wait_queues_clear(self) -> None:
        """Until no ready replica has a request waiting for a slot, as the replicas' own
        gauges say: a load step's queue on the old replica drains only as its answers end,
        however soon the new replicas serve. For at most what is left of scenario.recovery_s
        since the step; a queue still there then is for the judge to see."""
        t_step = self.disruption.t_step
        since = t_step if t_step is not None else time.time()
        left = since + self.cfg.scenario.recovery_s - time.time()

        def clear() -> bool:
            pods = self.target.ready_pods()
            gauges = [self.target.pod_metrics(p.name) for p in pods]
            # a replica whose gauges did not answer is not known to be clear
            return bool(pods) and all(g.get("vllm:num_requests_waiting", 1) == 0 for g in gauges)

        if self.wait_for(clear, max(0.0, left), "the replicas' queues to clear"):
            self.target.action("queues_clear")

    def wait_replaced(self, pod: str) -> None:
        """pod_kill's recovery: the desired replicas ready, and a replacement of the killed
        pod (its restarted engine, or a pod created after the kill) ready and having
        served a complete stream, by its own engine's count. t_recovered is when the target
        showed that, within scenario.recovery_s of the kill; the view of the pods from
        before the kill cannot end it."""
        t_kill = disruption_time(self.target.events()) or time.time()
        self.wait()
        if self.t_recovered is None:
            return
        restarted = self.disruption.restarts_at_kill

        def replacement_served() -> str | None:
            for p in self.target.ready_pods():
                # (a second's slack: Kubernetes stamps creation to the second)
                fresh = p.restarts > restarted if p.name == pod else p.created_at > t_kill - 1.0
                if fresh and self.target.pod_metrics(p.name).get("vllm:request_success_total"):
                    return p.name
            return None

        left = t_kill + self.cfg.scenario.recovery_s - time.time()
        served = self.wait_for(replacement_served, max(0.0, left), "a replacement to serve")
        if served:
            self.t_recovered = time.time()
            self.target.action("replacement_served", pod=served)
        else:
            self.t_recovered = None
            self.target.action(
                "not_recovered",
                why=f"no replacement of {pod} served a complete stream within "
                f"scenario.recovery_s ({self.cfg.scenario.recovery_s:g} s) of the kill",
            )
