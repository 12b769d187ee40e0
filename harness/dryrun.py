"""Dry run beneath the scenario: `--dry-run` (kube.dry_run) gives an unchanged `Scenario`
a target that takes no action (`DryRunTarget`) and a load that sends nothing
(`DryRunLoad`), as httpx's MockTransport replaces what lies beneath a client. Neither the
scenario nor a scenario file knows it is dry.

DryRunTarget: reads (pods, events, engine metrics, probes, preflight, permissions) go to
the real target; every action is checked as the real one checks it (the pod is the
Deployment's own, a node drain is allowed), printed as "[dry-run] would ...", put on the
timeline, and not taken. Waits are real until the first action is planned (settling
before the scenario is a read of the world as it is); after it, a wait is answered at
once from the unchanged world: a wait for what the action would have done finds it not
done, and the scenario goes on as it would at that wait's deadline, without the wait.

DryRunLoad: starts no Locust, sends no request and no golden prompt, and lets no time
pass; stopping it ends the run as DryRun, with the actions planned written to plan.json.
Nothing is changed, so there is nothing to restore.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import json
import signal
from collections.abc import Callable
from pathlib import Path

from harness.cluster.target import (
    READS,
    CannotRun,
    Target,
    acting_methods,
    canary_rollout,
    strategy_changes,
)
from harness.events import Event, EventKind
from harness.files import write_atomic
from harness.scenario import DryRun
from harness.waits import T

QUIET = (
    "steady_state",
    "recovered",
    "queues_clear",
    "health_probe",
    "kill_seen",
    "replacement_served",
)  # observations, not actions


class DryRunTarget(Target):
    """A target that reads through to `inner` and takes no action."""

    def __init__(self, inner: Target):
        self.inner = inner
        self.name = inner.name
        self.run_dir = inner.run_dir
        self.cfg = inner.cfg
        self.planned = False  # an action was planned: waits after it are answered at once

    # --- reads (READS) go to the real target: generated below the class -------------

    def load_adapter(self, pod: str, name: str, path: str, inplace: bool = False) -> None:
        self._own(pod)
        self.action("adapter_load", pod=pod, adapter=name, path=path, inplace=inplace)

    def unload_adapter(self, pod: str, name: str) -> None:
        self._own(pod)
        self.action("adapter_unload", pod=pod, adapter=name)

    # --- actions: checked, printed, recorded, not taken -----------------------------
    def action(self, kind: str, **detail) -> Event:
        if kind not in QUIET:
            print(f"[dry-run] would {kind} {json.dumps(detail, default=str)}", flush=True)
            self.planned = True
        return self.inner.action(kind, **(detail | {"dry_run": True}))

    def _own(self, pod: str) -> None:
        self.inner.check_own_pod(pod)

    def rollout(self, version, engine=None, max_surge=None, max_unavailable=None, min_ready_s=None):
        changes = strategy_changes(max_surge, max_unavailable, min_ready_s)
        self.action("rollout", to_version=version, engine=engine or {}, **changes)

    def start_canary(self, version: str, engine: dict | None = None) -> None:
        self.action("rollout", **canary_rollout(version, engine))

    def promote_canary(self) -> None:
        self.action("canary_promote")

    def rollback_canary(self) -> None:
        self.action("canary_rollback")

    def start_candidate(
        self, version: str, engine: dict | None = None, stable_selects_candidate: bool = False
    ) -> None:
        self.action("rollout", **canary_rollout(version, engine), weighted=True)

    def scale_candidate(self, replicas: int) -> None:
        self.action("candidate_scale", replicas=replicas)

    def set_weight(self, percent: float) -> None:
        self.action("canary_weight", percent=percent)

    def end_split(self) -> None:
        self.action("canary_weight", percent=None)

    def evict_pod(self, name: str, retry_deadline_s: float = 0.0) -> None:
        self._own(name)
        self.action("evict", pod=name)

    def drain_node(self, node: str, retry_deadline_s: float = 30.0) -> list[str]:
        self.inner.check_node_drain(node)
        victims = [p.name for p in self.inner.pods() if p.node == node and not p.terminating]
        self.action("drain_node", node=node, pods=victims)
        for name in victims:
            self.evict_pod(name, retry_deadline_s)
        return victims

    def uncordon(self, node: str) -> None:
        return None

    def scale(self, replicas: int) -> None:
        self.action("scale", replicas=replicas)

    def scale_down(self, pod: str) -> None:
        self._own(pod)
        replicas = len(self.inner.pods()) - 1
        self.action("scale_down", pod=pod, replicas=replicas, deletion_cost=-1000)

    def kill_pod(self, name: str, sig: int = signal.SIGKILL) -> None:
        self._own(name)
        self.action("kill", pod=name, signal=signal.Signals(sig).name)

    def exhaust_memory(
        self, name: str, context_tokens: int, model: str | None, retry: int = 0
    ) -> None:
        self._own(name)
        limit = self.inner.memory_limit_mb(name)
        if limit is None:  # as the real act would be: SKIPPED, nothing sent
            raise CannotRun(f"the engine container of {name} has no memory limit to cross")
        again = {"retry": retry} if retry else {}
        self.action("oom_request", pod=name, context_tokens=context_tokens, limit_mb=limit, **again)

    def delete_pod(self, name: str, grace_s: float | None = None) -> None:
        self._own(name)
        self.action("delete", pod=name, grace_s=grace_s)

    def preempt(self, name: str) -> None:
        self._own(name)
        blocker = self.inner.preemption_blocker()
        if blocker:  # as the real act would be: SKIPPED, nothing made
            raise CannotRun(blocker)
        node = next((p.node for p in self.inner.pods() if p.name == name), None)
        self.action("preempt", pod=name, node=node)

    def end_preemption(self) -> None:
        self.action("preemptor_gone")

    def lose_node(self, node: str) -> None:
        blocker = self.inner.node_loss_blocker()
        if blocker:
            raise CannotRun(blocker)
        pods = [p.name for p in self.inner.pods() if p.node == node and not p.terminating]
        self.action("node_loss", node=node, pods=pods)

    def return_node(self, node: str, timeout_s: float = 60.0) -> None:
        self.action("node_returned", node=node)

    def set_autoscaler(self, policy: str) -> None:
        self.action("autoscaler", policy=policy)

    def hand_back(self, as_act: bool = True, hold_scale_in: bool = False) -> None:
        self.action("autoscaler" if as_act else "scaler_watch", mode="cluster")

    def release_scale_in(self) -> None:
        return None

    def hold_count(self, replicas: int) -> None:
        if self.inner.workload_scalers():
            self.action("scale", replicas=replicas, why="hold the count against the scaler")

    def warm_engines(
        self, requests: int, model: str | None, prompt_tokens: int | None = None
    ) -> None:
        return None  # sends nothing

    def unload_run_adapters(self) -> list[str]:
        return []  # the adapters planned were not loaded

    def set_mirror(self, percent: float) -> None:
        self.action("mirror", percent=percent)

    def pd_rollout(self, roles: tuple[str, ...], version: str, engine: dict | None = None) -> Event:
        self._require_pd()
        return self.action("rollout", to_version=version, roles=list(roles), engine=engine or {})

    def pd_scale(self, role: str, replicas: int) -> Event:
        self._require_pd()
        return self.action("scale", role=role, replicas=replicas)

    def _require_pd(self) -> None:
        blocker = self.inner.pd_blocker()
        if blocker:  # as the real act would be: SKIPPED, nothing changed
            raise CannotRun(blocker)

    # --- waits -----------------------------------------------------------------------
    def wait_for(
        self,
        cond: Callable[[], T],
        timeout_s: float,
        what: str,
        poll_s: float = 0.05,
        stall_s: float | None = None,
    ) -> T:
        """Real until an action is planned; after it, cond() once, from the unchanged
        world (falsy where it waits for what the action would have done)."""
        if not self.planned:
            return super().wait_for(cond, timeout_s, what, poll_s, stall_s)
        return cond()

    def busiest_pod(self, min_in_flight: int = 1, timeout_s: float = 30.0, prefer=None, among=None):
        """No load runs: the ready pod with the most streams in flight now (the first)."""
        pods = [p for p in (among or self.pods)() if p.ready and not p.terminating]
        chosen = [p for p in pods if prefer is None or prefer(p)] or pods
        return max(chosen, key=lambda p: self.in_flight(p.name)) if chosen else None


def _read_through(name: str):
    if isinstance(getattr(Target, name), property):
        return property(lambda self: getattr(self.inner, name))

    @functools.wraps(getattr(Target, name), updated=())  # (not its abstract mark)
    def read(self, *args, **kwargs):
        return getattr(self.inner, name)(*args, **kwargs)

    return read


def _unplanned(name: str):
    @functools.wraps(getattr(Target, name), updated=())  # (not its abstract mark)
    def act(self, *args, **kwargs):
        raise CannotRun(
            f"the dry run has no plan for {name} yet: it would act; run the scenario "
            "without --dry-run where acting is safe"
        )

    act.unplanned = True  # (tests/test_dryrun.py: every action has a plan)
    return act


for _name in READS:
    if _name not in DryRunTarget.__dict__:
        setattr(DryRunTarget, _name, _read_through(_name))
for _name in acting_methods():
    if _name not in DryRunTarget.__dict__:
        setattr(DryRunTarget, _name, _unplanned(_name))
abc.update_abstractmethods(DryRunTarget)


class DryRunLoad:
    """The load of a dry run: the scenario's calls on a LoadRun, sending nothing."""

    def __init__(self, target: Target, url: str, run_dir: Path, settings, thresholds):
        self.target, self.url, self.run_dir = target, url, Path(run_dir)
        self.settings, self.thresholds = settings, thresholds

    @classmethod
    def factory(cls, target: Target) -> Callable[..., DryRunLoad]:
        """What Scenario(load_factory=...) calls, as it would call LoadRun."""
        return lambda url, run_dir, settings, thresholds: cls(
            target, url, run_dir, settings, thresholds
        )

    def preflight(self) -> None:
        return None

    def start(self) -> DryRunLoad:
        return self

    def counts(self) -> dict:
        return {"sent": 0, "finished": 0, "in_flight": 0, "complete": 0, "broken": 0}

    def outlasting(self, t: float) -> set[str] | None:
        return None  # no stream, so none traced to a pod

    def settled_at(self) -> float | None:
        return None  # no stream in flight: none to wait for

    def wait_until_in_flight(self, n: int, timeout_s: float = 30.0) -> None:
        return None

    def wait_until_step(self, timeout_s: float) -> float:
        import time

        return time.time()  # the step would come now

    def hold(self, seconds: float, what: str = "time to pass") -> None:
        return None  # no time needs to pass: nothing runs

    def set_models(self, models: list, timeout_s: float = 10.0) -> float:
        import time

        return time.time()  # no request is sent, whatever it would name

    def ask(self, url: str, prompts: list, model: str | None, client_settings: dict) -> list:
        return []  # no golden prompt is sent

    def _check_alive(self) -> None:
        return None

    def stop(self):
        """The end of the walk: the actions planned go to plan.json; DryRun says so."""
        planned = [
            {"action": e.detail.get("action")}
            | ({"pod": e.pod} if e.pod else {})
            | ({"node": e.node} if e.node else {})
            | {k: v for k, v in e.detail.items() if k != "action"}
            for e in self.target.events()
            if e.kind == EventKind.ACTION
        ]
        path = self.run_dir / "plan.json"
        write_atomic(path, json.dumps(planned, indent=2, default=str))
        raise DryRun(f"dry run: {len(planned)} actions printed, none taken (plan in {path})")

    def close(self) -> None:
        return None


def kube_target(cfg, run_dir, kind: str | None = None):
    """The Kubernetes target for a config: wrapped in DryRunTarget when kube.dry_run is set
    (the Kubernetes target itself refuses to be built dry, and holds no dry-run branch)."""
    from harness.cluster.kube.target import KubeTarget

    if not cfg.kube.dry_run:
        return KubeTarget(cfg, run_dir, kind=kind)
    wet = dataclasses.replace(cfg, kube=dataclasses.replace(cfg.kube, dry_run=False))
    return DryRunTarget(KubeTarget(wet, run_dir, kind=kind))
