"""What the Kubernetes target is allowed to do, asked before it acts.

Every verb the target uses on the namespace under test is one row of PERMISSIONS, with
what uses it and which scenarios need it (None: every scenario, from the settle on).
Before anything is touched, the target asks the API server about each row with a
SelfSubjectAccessReview (allowed to every authenticated identity): a row every scenario
needs is an error naming each missing permission on a line of its own; a row only some
scenarios need ends those scenarios as SKIPPED, with one line per missing permission.
The chart's Role (charts/rollcheck/templates/rbac.yaml) grants exactly these rows.

Reads the target can do without (the Services that name the engine's port, the Job's
deadline, free GPUs, the gateway's logs) are asked where they are used, and said there;
writes to a scaler (an HPA held, a ScaledObject paused) are granted by name (the chart's
target.hpas and target.scaledObjects) and refused in one line when acting; node drains
are asked by node_drain_blocker, and preemption's cluster-wide rows by its own blocker
(preemption.ASKED).
"""

from __future__ import annotations

from dataclasses import dataclass

EVERY = None  # the row is needed by every scenario
DELETE_KILL = "pod_kill with kube.pod_kill: delete"  # a kill by kube.kill_command needs none


@dataclass(frozen=True)
class Permission:
    verb: str
    resource: str
    group: str = ""
    sub: str = ""
    uses: str = ""
    kinds: frozenset[str] | None = EVERY
    named: bool = False  # asked (and granted) for the Deployment under test only

    @property
    def what(self) -> str:
        return f"{self.resource}/{self.sub}" if self.sub else self.resource


def _kinds(*names: str) -> frozenset[str]:
    return frozenset(names)


PERMISSIONS = [
    Permission("get", "deployments", "apps", uses="the Deployment under test", named=True),
    # list and watch by name (fieldSelector metadata.name), so resourceNames apply
    Permission("list", "deployments", "apps", uses="its rollout's progress", named=True),
    Permission("watch", "deployments", "apps", uses="its rollout's progress", named=True),
    Permission(
        "patch",
        "deployments",
        "apps",
        uses="the restore note, the template (rollout, canary, startup) and putting it back",
        named=True,
    ),
    Permission(
        "patch", "deployments", "apps", "scale", uses="holding the replica count", named=True
    ),
    Permission("list", "replicasets", "apps", uses="which version each pod runs"),
    Permission("watch", "replicasets", "apps", uses="which version each pod runs"),
    Permission("get", "pods", uses="the pods' state"),
    Permission("list", "pods", uses="the pods' state"),
    Permission("watch", "pods", uses="the pods' lifecycle on the timeline"),
    Permission("get", "pods", sub="proxy", uses="the engines' /metrics and /health"),
    Permission("get", "pods", sub="log", uses="the engines' logs (tracing)"),
    Permission("list", "endpointslices", "discovery.k8s.io", uses="when the gateway routes"),
    Permission("watch", "endpointslices", "discovery.k8s.io", uses="when the gateway routes"),
    Permission("list", "horizontalpodautoscalers", "autoscaling", uses="the Deployment's own HPA"),
    Permission("watch", "horizontalpodautoscalers", "autoscaling", uses="the scaler's decisions"),
    Permission("list", "scaledobjects", "keda.sh", uses="the Deployment's own KEDA scaler"),
    Permission("list", "events", uses="the cluster's events on the timeline"),
    Permission("watch", "events", uses="the cluster's events on the timeline"),
    Permission(
        "delete", "pods", uses="killing a pod by deleting it (grace 0)", kinds=_kinds(DELETE_KILL)
    ),
    Permission("create", "pods", sub="eviction", uses="evicting a pod", kinds=_kinds("drain")),
    Permission("patch", "pods", uses="pod-deletion-cost of the victim", kinds=_kinds("scale_down")),
]


def needed_by(p: Permission) -> str:
    return "every scenario" if p.kinds is EVERY else ", ".join(sorted(p.kinds))


def line(p: Permission, namespace: str) -> str:
    """One missing permission: what, where, what uses it and who needs it."""
    return (
        f"RBAC: not allowed to {p.verb} {p.what} in namespace {namespace}: {p.uses} "
        f"(needed by {needed_by(p)}); grant it with the chart's Role (charts/rollcheck)"
    )


def kinds_of(kind: str | None, pod_kill: str = "command") -> set[str]:
    """The kinds a scenario's rows are listed under: its own, and how it acts."""
    out = {kind} if kind else set()
    if kind == "pod_kill" and pod_kill == "delete":
        out.add(DELETE_KILL)
    return out


def missing(allowed, kinds: set[str]) -> tuple[list[Permission], list[Permission]] | None:
    """(rows every scenario needs, rows these kinds need) that `allowed(p)` refuses; None
    when the cluster does not answer access reviews (find out when acting)."""
    base, own = [], []
    for p in PERMISSIONS:
        if p.kinds is not EVERY and not kinds & p.kinds:
            continue
        ok = allowed(p)
        if ok is None:
            return None
        if not ok:
            (base if p.kinds is EVERY else own).append(p)
    return base, own


def scaler_line(kind: str, name: str, namespace: str, value: str) -> str:
    """A scaler of the Deployment's own that the harness may not write (hold or pause)."""
    return (
        f"RBAC: not allowed to patch {kind} {name} in namespace {namespace}: it scales the "
        f"Deployment, and rollcheck holds it for each scenario and puts it back (needed by "
        f"every scenario); name it in the chart's {value}"
    )
