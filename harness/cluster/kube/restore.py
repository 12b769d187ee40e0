"""The Kubernetes target's restore: recorded before the first change, put back at the end."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from kubernetes.client.rest import ApiException

from harness.cluster.kube.common import RESTORE, Cluster, Shared, _message, connect
from harness.cluster.kube.nodeloss import NodeLoss
from harness.cluster.kube.pd import PrefillRole
from harness.cluster.kube.preemption import Preemption
from harness.cluster.kube.route import route_of
from harness.cluster.kube.split import WeightedSplit
from harness.cluster.target import TargetError
from harness.config.schema import RunConfig
from harness.events import EventLog


class Restore:
    """What the run changes is written down before the first change and put back at
    the end; the record is removed last. `release`: hands the replica count back to the
    cluster's scalers, once their ScaledObjects are un-paused."""

    def __init__(self, c: Cluster, shared: Shared, release: Callable[[], None] = lambda: None):
        self.c, self.s, self.release = c, shared, release

    def record(self, dep) -> None:
        """Before any change: what to put back, kept on the Deployment itself."""
        api = self.c.api
        self.s.original = {
            "replicas": dep.spec.replicas,
            "template": api.sanitize_for_serialization(dep.spec.template),
            "strategy": api.sanitize_for_serialization(dep.spec.strategy),
            "paused": bool(dep.spec.paused),
            "minReadySeconds": dep.spec.min_ready_seconds or 0,
            "run": self.c.run_dir.name,
        }

    def mark_pending(self) -> None:
        """Write (or rewrite) what to put back before changing anything."""
        self.s.marked = True
        note = json.dumps(
            self.s.original
            | {"cordoned": self.s.cordoned, "hpas": self.s.hpa_held, "preemptor": self.s.preemptor}
            | {"lost_node": self.s.lost_node, "route": self.s.route, "candidate": self.s.candidate}
            | {"prefill": self.s.prefill}
        )
        self.c.patch_deployment({"metadata": {"annotations": {RESTORE: note}}})

    def put_back_hpas(self) -> list[str]:
        """Every HPA held, as it was (spec and field managers); what was put back."""
        done = []
        for name, original in list(self.s.hpa_held.items()):
            if self.c.hpa_put_back(name, original):
                done.append(f"HorizontalPodAutoscaler {name} as it was")
            del self.s.hpa_held[name]
        return done

    def put_back_route(self) -> list[str]:
        """The HTTPRoute rule's weights and filters as recorded (weighted_canary, shadow)."""
        record = self.s.route
        if not record:
            return []
        changed = route_of(self.c, record).put_back(record) is not None
        self.s.route = None
        return [f"HTTPRoute {record['name']} rule {record['rule']} as it was"] if changed else []

    def remove_candidate(self) -> list[str]:
        """weighted_canary's candidate Deployment, if it is still there (after the route
        no longer sends it traffic)."""
        split = WeightedSplit(self.c, self.s, self.mark_pending, lambda selector: None)
        return [f"removed {what}" for what in split.remove_candidate()]

    def remove_preemptor(self) -> list[str]:
        """preemption's pod and PriorityClass, if they are still there."""
        return [f"removed {what}" for what in Preemption(self.c, self.s, self.mark_pending).end()]

    def restore(self) -> list[str]:
        """Bring back a lost node; put back replicas, the pod template, the strategy,
        cordons, KEDA pauses, the HPAs held, an HTTPRoute's rule and the prefill role's
        Deployment (pd_rollout); remove a preemptor and a weighted canary's candidate
        Deployment."""
        c, s = self.c, self.s
        done: list[str] = []
        done += NodeLoss(c, s, self.mark_pending, list).back()  # a lost node first of all
        orig = s.original
        dep = c.read_deployment()
        current_template = c.api.sanitize_for_serialization(dep.spec.template)
        # the restore-pending record is removed last, once everything it lists is back: a
        # failure on the way leaves it for `rollcheck kube-restore`
        body: dict = {"spec": {}}
        if current_template != orig["template"]:
            body["spec"]["template"] = orig["template"]
            done.append("pod template")
        if c.api.sanitize_for_serialization(dep.spec.strategy) != orig["strategy"]:
            body["spec"]["strategy"] = orig["strategy"]
            done.append("rollout strategy")
        # a canary holds the rollout: paused, with a minReadySeconds under its deadline
        if bool(dep.spec.paused) != orig.get("paused", False):
            body["spec"]["paused"] = orig.get("paused", False)
            done.append("resumed" if not orig.get("paused") else "paused")
        if (dep.spec.min_ready_seconds or 0) != orig.get("minReadySeconds", 0):
            body["spec"]["minReadySeconds"] = orig.get("minReadySeconds", 0)
            done.append(f"minReadySeconds {orig.get('minReadySeconds', 0)}")
        if dep.spec.replicas != orig["replicas"]:
            body["spec"]["replicas"] = orig["replicas"]
            done.append(f"replicas {dep.spec.replicas} -> {orig['replicas']}")
        if "template" in body["spec"]:
            c.replace_template(c.deployment, orig["template"])
            del body["spec"]["template"]
        if body["spec"]:
            c.patch_deployment(body)
        for node in list(s.cordoned):
            c.core.patch_node(node, {"spec": {"unschedulable": False}})
            done.append(f"uncordoned {node}")
            s.cordoned.remove(node)
        for so in list(s.keda_paused):
            c.keda_pause(so, None)
            done.append(f"unpaused ScaledObject {so}")
            s.keda_paused.remove(so)
        done += self.put_back_hpas()
        done += self.remove_preemptor()
        done += self.put_back_route()
        done += self.remove_candidate()
        done += PrefillRole(c, s, self.mark_pending).put_back()
        self.release()  # the count is the cluster's scalers' again
        c.patch_deployment({"metadata": {"annotations": {RESTORE: None}}})
        c.emit("restored", what=done)
        if done:
            print(f"rollcheck: restored {c.ns}/{c.deployment}: {', '.join(done)}", flush=True)
        return done


def restore_pending(cfg: RunConfig) -> list[str]:
    """`rollcheck kube-restore`: put back what an interrupted run recorded on the Deployment."""
    run_dir = Path("reports") / "kube-restore"
    run_dir.mkdir(parents=True, exist_ok=True)
    c = Cluster(
        connect(cfg.kube.kubeconfig, cfg.kube.context),
        cfg,
        run_dir,
        EventLog(run_dir / "events.jsonl"),
    )
    where = f"{c.ns}/{c.deployment}"
    try:
        try:
            dep = c.read_deployment()
        except ApiException as exc:
            if exc.status == 404:
                raise TargetError(
                    f"deployment {where} does not exist: nothing to restore (a deleted "
                    "Deployment takes its restore record with it); check kube.namespace and "
                    "kube.deployment"
                ) from None
            raise TargetError(
                f"reading deployment {where}: HTTP {exc.status} {_message(exc)}"
            ) from None
        note = (dep.metadata.annotations or {}).get(RESTORE)
        if not note:
            return []
        orig = json.loads(note)
        shared = Shared(
            original={k: orig[k] for k in ("replicas", "template", "strategy", "run")}
            | {k: orig[k] for k in ("paused", "minReadySeconds") if k in orig},
            cordoned=list(orig.get("cordoned", [])),
            hpa_held=dict(orig.get("hpas", {})),
            preemptor=orig.get("preemptor"),
            lost_node=orig.get("lost_node"),
            route=orig.get("route"),
            candidate=orig.get("candidate"),
            prefill=orig.get("prefill"),
            keda_paused=c.scaled_objects(),
        )
        try:
            return Restore(c, shared).restore()
        except ApiException as exc:  # the Deployment went away in between, or a node did
            raise TargetError(f"restoring {where}: HTTP {exc.status} {_message(exc)}") from None
    finally:
        c.events.close()
