"""What the cluster's own scalers decide, as events on the timeline.

Two watches feed it: the Deployment (its spec.replicas, and from managedFields who set
it: `kube-controller-manager` is the HPA controller, `keda`/`keda-operator` is KEDA's
0 <-> 1, `rollcheck` is the harness) and the HorizontalPodAutoscalers targeting it
(status.desiredReplicas and the metric values behind each decision).

While the harness holds the replica count (it scaled and has not handed the count
back) or a rollout of its own is in progress, a change by anyone else is a fight:
`scaler_fought`, named, never swallowed. Otherwise a change is the scaler's decision:
`replicas_changed`. Objects arrive as plain dicts (the API's JSON), so tests feed it
literal statuses.
"""

from __future__ import annotations

from collections.abc import Callable

HARNESS_MANAGER = "rollcheck"  # the harness's field manager (its client's user agent)


def replicas_manager(dep: dict) -> str | None:
    """Who last set spec.replicas: the managedFields entry that owns it, latest first.
    None for a count of 0 set through deployments/scale: its spec.replicas is omitted
    when 0, so no manager owns it (measured: KEDA's 1 -> 0 leaves no owner)."""
    owners = []
    for entry in (dep.get("metadata") or {}).get("managedFields") or []:
        fields = (entry.get("fieldsV1") or {}).get("f:spec") or {}
        if "f:replicas" in fields:
            owners.append((entry.get("time") or "", entry.get("manager") or "?"))
    return max(owners)[1] if owners else None


def scaler_kind(manager: str | None) -> str:
    """The kind of actor a field manager is: hpa, keda, harness, or other."""
    if manager is None:
        return "other"
    if manager == HARNESS_MANAGER:
        return "harness"
    if manager.startswith("kube-controller-manager"):
        return "hpa"
    if manager.startswith("keda"):
        return "keda"
    return "other"


def hpa_metrics(hpa: dict) -> list[str]:
    """Each metric of an HPA's status as `name=current` (target from the spec), in order."""
    status = hpa.get("status") or {}
    targets = {}
    for m in (hpa.get("spec") or {}).get("metrics") or []:
        kind = m.get("type", "")
        block = m.get(kind[:1].lower() + kind[1:], {}) if kind else {}
        name = ((block.get("metric") or {}).get("name")) or block.get("name") or kind
        t = block.get("target") or {}
        targets[name] = t.get("averageValue") or t.get("value") or t.get("averageUtilization")
    out = []
    for m in status.get("currentMetrics") or []:
        kind = m.get("type", "")
        block = m.get(kind[:1].lower() + kind[1:], {}) if kind else {}
        name = ((block.get("metric") or {}).get("name")) or block.get("name") or kind
        cur = block.get("current") or {}
        value = cur.get("averageValue") or cur.get("value") or cur.get("averageUtilization")
        if value is None:  # a metric the HPA could not read (its events say why)
            continue
        target = targets.get(name)
        out.append(f"{name}={value}" + (f" (target {target})" if target is not None else ""))
    return out


DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def _ready_since(pod: dict) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") == "True":
            return c.get("lastTransitionTime")
    return None


def removal_reason(name: str, pods: list[dict]) -> str:
    """Why a ReplicaSet scaling down chose pod `name` among `pods` (it included), in the
    controller's own order: not ready first, then the lowest pod-deletion-cost, the most
    pods on one node, the shortest time ready, the most restarts, the newest."""
    by_name = {(p.get("metadata") or {}).get("name"): p for p in pods}
    me = by_name.get(name)
    if me is None:
        return "the pod was not seen"
    others = [p for n, p in by_name.items() if n != name]
    n = len(pods)
    if _ready_since(me) is None and all(_ready_since(o) for o in others):
        return f"it was the only one of {n} not ready (the ReplicaSet removes those first)"

    def cost(p: dict) -> int:
        value = ((p.get("metadata") or {}).get("annotations") or {}).get(DELETION_COST, "0")
        try:
            return int(value)
        except ValueError:
            return 0

    if others and cost(me) < min(cost(o) for o in others):
        return (
            f"its {DELETION_COST} {cost(me)} was the lowest of {n} (others "
            f"{sorted({cost(o) for o in others})}): the ReplicaSet removes the lowest first"
        )
    node = lambda p: (p.get("spec") or {}).get("nodeName")  # noqa: E731
    on_node = sum(1 for p in pods if node(p) == node(me))
    elsewhere = [o for o in others if node(o) != node(me)]
    if elsewhere and all(on_node > sum(1 for p in pods if node(p) == node(o)) for o in elsewhere):
        return f"its node {node(me)} ran {on_node} of the {n} replicas, the most"
    since = _ready_since(me)
    if since and others and all((_ready_since(o) or "") < since for o in others):
        return (
            f"it had been ready the shortest time of {n} (since {since}): with no "
            "pod-deletion-cost set the ReplicaSet removes the most recently ready first"
        )
    created_of = lambda p: (p.get("metadata") or {}).get("creationTimestamp") or ""  # noqa: E731
    created = created_of(me)
    if others and all(_ready_since(o) == since and created_of(o) == created for o in others):
        return (
            f"all {n} replicas were created and ready in the same second ({created}) with no "
            "pod-deletion-cost set: a tie, which the ReplicaSet breaks by its own order"
        )
    if others and all(created_of(o) <= created for o in others):
        return f"it was the newest of {n} (created {created})"
    return f"the ReplicaSet's order (readiness, pod-deletion-cost, age) among {n} replicas"


class ScalerObserver:
    """Turns the Deployment's and its HPAs' watch events into scaler events."""

    def __init__(self, emit: Callable[..., object], deployment: str):
        self.emit, self.deployment = emit, deployment
        self.replicas: int | None = None
        self.held: int | None = None  # the count the harness set and still holds
        self.rolling = False  # a rollout of the harness's own is in progress
        self._hpa: dict[str, tuple] = {}

    # --- what the harness does ------------------------------------------------------
    def hold(self, replicas: int) -> None:
        self.held = replicas

    def release(self) -> None:
        self.held = None

    # --- what the cluster does --------------------------------------------------------
    def on_deployment(self, kind: str, dep: dict) -> None:
        if (dep.get("metadata") or {}).get("name") != self.deployment or kind == "DELETED":
            return
        replicas = (dep.get("spec") or {}).get("replicas")
        before, self.replicas = self.replicas, replicas
        if before is None or replicas == before:
            return
        by = replicas_manager(dep)
        who = scaler_kind(by)
        detail = {"replicas_from": before, "replicas_to": replicas, "by": by, "scaler": who}
        if who == "harness" or (by is None and replicas == self.held):
            return  # the harness's own scale action is on the timeline already
        if self.held is not None and replicas != self.held:
            self.emit("scaler_fought", held=self.held, **detail)
        elif self.rolling:
            self.emit("scaler_fought", during="rollout", **detail)
        else:
            self.emit("replicas_changed", **detail)

    def on_hpa(self, kind: str, hpa: dict) -> None:
        ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        if ref.get("kind") != "Deployment" or ref.get("name") != self.deployment:
            return
        name = (hpa.get("metadata") or {}).get("name")
        if kind == "DELETED":
            self._hpa.pop(name, None)
            return
        status = hpa.get("status") or {}
        state = (status.get("desiredReplicas"), status.get("currentReplicas"))
        if self._hpa.get(name) == state or state[1] is None:  # (None: not yet reconciled)
            return
        self._hpa[name] = state
        limited = [
            c.get("reason")
            for c in status.get("conditions") or []
            if c.get("type") == "ScalingLimited" and c.get("status") == "True"
        ]
        self.emit(
            "scaler_status",
            hpa=name,
            desired=state[0],
            current=state[1],
            metrics=hpa_metrics(hpa),
            limited=limited[0] if limited else None,
        )
