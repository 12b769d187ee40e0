"""Dry run as a layer, not as branches: `--dry-run` (kube.dry_run) wraps the target and
the scenario, and neither knows it is dry.

DryRunTarget: reads (pods, events, engine metrics, preflight, permissions) go to the
target as usual; every action is checked as the real one checks it (the pod is the
Deployment's own, a node drain is allowed), printed as "[dry-run] would ..." and put on
the timeline, and not taken; waits for an action's effect return at once (settling
before the scenario is a read, and is waited for). Nothing is changed, so there is
nothing to restore.

DryRunScenario: no load and no waits; the scenario walks through its actions, and its
judge writes them to plan.json and ends the run as DryRun.
"""

from __future__ import annotations

import json
import signal

from harness.cluster.target import Target, strategy_changes
from harness.files import write_atomic
from harness.scenario import DryRun, Scenario

QUIET = (
    "steady_state",
    "recovered",
    "queues_clear",
    "health_probe",
    "kill_seen",
)  # observations, not actions


class DryRunTarget:
    dry_run = True

    def __init__(self, inner: Target):
        self._inner = inner

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def action(self, kind: str, **detail):
        if kind not in QUIET:
            print(f"[dry-run] would {kind} {json.dumps(detail, default=str)}", flush=True)
        return self._inner._events.emit("action", action=kind, **(detail | {"dry_run": True}))

    def _own(self, pod: str) -> None:
        check = getattr(self._inner, "_owned_pod", None)  # the Kubernetes target's rule
        if check is not None:
            check(pod)

    # --- actions: checked, printed, recorded, not taken ---------------------------
    def rollout(self, version, engine=None, max_surge=None, max_unavailable=None, min_ready_s=None):
        changes = strategy_changes(max_surge, max_unavailable, min_ready_s)
        self.action("rollout", to_version=version, engine=engine or {}, **changes)

    def rollout_done(self) -> bool:
        return True

    def evict_pod(self, name: str, retry_deadline_s: float = 0.0) -> None:
        self._own(name)
        self.action("evict", pod=name)

    def drain_node(self, node: str, retry_deadline_s: float = 30.0) -> list[str]:
        self._inner.check_node_drain(node)
        victims = [p.name for p in self._inner.pods() if p.node == node and not p.terminating]
        self.action("drain_node", node=node, pods=victims)
        for name in victims:
            self.evict_pod(name, retry_deadline_s)
        return victims

    def uncordon(self, node: str) -> None:
        pass

    def scale(self, replicas: int) -> None:
        self.action("scale", replicas=replicas)

    def scale_down(self, pod: str) -> None:
        self._own(pod)
        replicas = len(self._inner.pods()) - 1
        self.action("scale_down", pod=pod, replicas=replicas, deletion_cost=-1000)

    def kill_pod(self, name: str, sig: int = signal.SIGKILL) -> None:
        self._own(name)
        self.action("kill", pod=name, signal=signal.Signals(sig).name)

    def delete_pod(self, name: str, grace_s: float | None = None) -> None:
        self._own(name)
        self.action("delete", pod=name, grace_s=grace_s)

    def set_autoscaler(self, policy: str) -> None:
        self.action("autoscaler", policy=policy)

    def hand_back(self, as_act: bool = True, hold_scale_in: bool = False) -> None:
        self.action("autoscaler" if as_act else "scaler_watch", mode="cluster")

    def release_scale_in(self) -> None:
        return None

    def hold_count(self, replicas: int) -> None:
        if self._inner.workload_scalers():
            self.action("scale", replicas=replicas, why="hold the count against the scaler")

    # --- waits for what an action would do: at once (settling first is a read) -------
    def wait_for(self, cond, timeout_s, what, poll_s=0.05, stall_s=None) -> None:
        return None


class DryRunScenario(Scenario):
    """The scenario's steps without load, waits or measurements; the plan at the end."""

    @property
    def dry_run(self) -> bool:
        return True

    def steady_state(self, in_flight: int | None = None, **load_overrides) -> None:
        self.target.action("steady_state")

    def busiest_pod(self, min_in_flight: int | None = None, past_prestop: bool = False):
        return self.target.ready_pods()[0]

    def disturb(self, *pods: str) -> None:
        self.victims = list(pods)

    def _wait_seen_terminating(self, pods: list[str]) -> None:
        return None

    def wait_for_load_step(self) -> None:
        self.target.action("load_step", users=self.cfg.scenario.step_users)

    def record_health(self, pod: str, period_s: float = 0.2) -> None:
        return None

    def hand_to_scaler(self, as_act: bool = True) -> None:
        self.target.hand_back(as_act)  # no wait for the scaler's metrics: nothing runs

    def autoscale_for_step(self) -> int:
        self.target.scale(self.cfg.replicas + 1)
        return self.cfg.replicas + 1

    def relint(self, min_startup_s: float) -> None:
        return None

    def pod_probes(self) -> dict:
        return self.configured_probes()

    def wait_load_idle(self) -> None:
        return None

    def cool_down(self, seconds: float | None = None) -> None:
        return None

    def wait_queues_clear(self) -> None:
        return None

    def require_gpus(self, surge: int, what: str = "", pods: str = "", fix: str = "") -> None:
        return None

    def require_gpus_for_step(self) -> None:
        return None

    def confirm_rolled_out(self, version: str) -> None:
        return None

    def judge(self, *checks, **options) -> dict:
        self._health_stop.set()
        planned = [
            {"action": e.detail.get("action")}
            | ({"pod": e.pod} if e.pod else {})
            | ({"node": e.node} if e.node else {})
            | {k: v for k, v in e.detail.items() if k != "action"}
            for e in self.target.events()
            if e.kind == "action"
        ]
        write_atomic(self.run_dir / "plan.json", json.dumps(planned, indent=2, default=str))
        raise DryRun(
            f"dry run: {len(planned)} actions printed, none taken "
            f"(plan in {self.run_dir / 'plan.json'})"
        )
