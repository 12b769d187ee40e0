"""preemption's act on a cluster: a pod of a higher priority that only fits where an engine
pod runs, so that the real kube-scheduler preempts it.

The preemptor asks for the accelerators (extended resources such as nvidia.com/gpu) free on
the victim's node plus the victim's own, is held to that node by affinity, and runs the
pause image under a PriorityClass one above the victim's priority: only pods of the
engine's priority or lower are candidates, and the scheduler chooses among them (Kubernetes'
DefaultPreemption: the fewest, lowest-priority victims, a PodDisruptionBudget respected
only where it can be). Its victims get the DisruptionTarget condition, reason
PreemptionByScheduler, and terminate gracefully; the Deployment's replacement waits
Pending while the preemptor holds the accelerators. Both objects are written down for the
restore before they are made, and removed by end() or the restore.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from kubernetes import client
from kubernetes.client.rest import ApiException

from harness.cluster.kube.common import Cluster, Shared, _message
from harness.cluster.target import CannotRun, TargetError

# what preemption asks before acting, (verb, resource, group, in the target's namespace);
# the chart's rbac.preemption grants exactly these
ASKED = (
    ("create", "priorityclasses", "scheduling.k8s.io", False),
    ("delete", "priorityclasses", "scheduling.k8s.io", False),
    ("get", "nodes", "", False),
    ("list", "pods", "", False),
    ("create", "pods", "", True),
    ("delete", "pods", "", True),
)
MAX_PRIORITY = 1_000_000_000  # user PriorityClasses stop here; above is the system's
PREEMPTED = "PreemptionByScheduler"  # the DisruptionTarget condition's reason
# how long a PriorityClass just made may stay unknown to the Priority admission plugin's
# cache (seen on kube-local's API server on a busy 2-core machine: one refusal in a CI run)
ADMISSION_CACHE_S = 15.0


def accelerators(resources: dict) -> dict[str, int]:
    """The extended resources (a domain-qualified name: nvidia.com/gpu, amd.com/gpu,
    google.com/tpu) among a container's limits or requests, as counts."""
    out: dict[str, int] = {}
    for section in ("limits", "requests"):
        for name, value in (resources.get(section) or {}).items():
            if "/" in name and not name.startswith(("kubernetes.io/", "hugepages-")):
                out[name] = max(out.get(name, 0), int(str(value)))
    return out


def free_on_node(node: dict, pods: list[dict], names: list[str]) -> dict[str, int]:
    """What the node's allocatable leaves of each resource in `names`, once every pod bound
    to it that has not ended asks for its own (terminating pods still hold theirs)."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    free = {n: int(str(alloc.get(n, 0))) for n in names}
    for p in pods:
        if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for c in (p.get("spec") or {}).get("containers") or []:
            held = accelerators(c.get("resources") or {})
            for n in names:
                free[n] -= held.get(n, 0)
    return {n: max(0, v) for n, v in free.items()}


def create_once_admitted(core, ns: str, pod: dict, wait_s: float = ADMISSION_CACHE_S) -> None:
    """Create `pod`, which names a PriorityClass. The API server's Priority admission plugin
    reads PriorityClasses from its informer's cache, so a class made a moment ago can be
    refused (403 "no PriorityClass with name ... was found") until the cache has it: that
    refusal is tried again for up to `wait_s`; any other is raised at once."""
    name = pod["spec"]["priorityClassName"]
    deadline = time.monotonic() + wait_s
    while True:
        try:
            core.create_namespaced_pod(ns, pod)
            return
        except ApiException as exc:
            unseen = exc.status == 403 and f"no PriorityClass with name {name}" in _message(exc)
            if not unseen or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def preemptor_objects(run: str, ns: str, victim: dict, engine: str | None, image: str,
                      free: dict[str, int]) -> tuple[dict, dict]:  # fmt: skip
    """(PriorityClass, Pod) for preempting `victim` (the API's JSON of the pod)."""
    spec = victim["spec"]
    asked = accelerators((engine_of_json(spec, engine) or {}).get("resources") or {})
    if not asked:
        raise CannotRun(
            f"the engine container of {victim['metadata']['name']} asks for no accelerator "
            "(an extended resource such as nvidia.com/gpu): a preemptor would have "
            "nothing to take from it"
        )
    value = min(MAX_PRIORITY, int(spec.get("priority") or 0) + 1)
    # a DNS name, unique per namespace and run (a PriorityClass is cluster-wide)
    name = re.sub(r"[^a-z0-9-]+", "-", f"rollcheck-preemptor-{ns}-{run}".lower())[:63].strip("-")
    pc = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "rollcheck"}},
        "value": value,
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": f"rollcheck's preemption scenario in {ns}: removed when it ends",
    }
    want = {n: str(free.get(n, 0) + k) for n, k in asked.items()}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"app.kubernetes.io/managed-by": "rollcheck", "rollcheck/role": "preemptor"},
        },
        "spec": {
            "priorityClassName": name,
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "tolerations": spec.get("tolerations") or [],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {
                                        "key": "metadata.name",
                                        "operator": "In",
                                        "values": [spec["nodeName"]],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65535,
                "seccompProfile": {"type": "RuntimeDefault"},
            },  # fmt: skip
            "containers": [
                {
                    "name": "preemptor",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "resources": {"requests": want, "limits": want},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }
    return pc, pod


def engine_of_json(spec: dict, engine: str | None) -> dict | None:
    """The engine container of a pod spec given as JSON (the first when unnamed)."""
    containers = spec.get("containers") or []
    return next(
        (c for c in containers if c.get("name") == engine), containers[0] if containers else None
    )


class Preemption:
    """Makes and ends the preemptor; the restore removes what end() could not.
    `mark_pending`: writes the restore note (Restore.mark_pending), before anything is made."""

    def __init__(self, c: Cluster, shared: Shared, mark_pending: Callable[[], None]):
        self.c, self.s, self.mark_pending = c, shared, mark_pending
        self.scheduling = client.SchedulingV1Api(c.api)

    def blocker(self) -> str | None:
        if not self.c.k.allow_preemption:
            return (
                "a preemptor takes every free accelerator on the victim's node and may "
                "preempt any pod there of the engine's priority or lower: set "
                "kube.allow_preemption=true to allow it"
            )
        for verb, resource, group, ns in ASKED:
            if self.c.allowed(verb, resource, group, ns=ns) is False:
                where = f" in namespace {self.c.ns}" if ns else " (cluster-wide)"
                return (
                    f"RBAC: not allowed to {verb} {resource}{where}, needed by preemption; "
                    "install the chart with rbac.preemption=true"
                )
        return None

    def start(self, victim: str) -> dict:
        """Make the PriorityClass and the preemptor for `victim`'s node; the act's detail
        (on the timeline as the action `preempt`) is returned."""
        pod = self.s.pod(victim)
        if pod is None or not pod.spec.node_name:
            raise TargetError(f"pod {victim} is not bound to a node: nothing to preempt")
        as_json = self.c.api.sanitize_for_serialization(pod)
        node = pod.spec.node_name
        try:
            node_json = self.c.api.sanitize_for_serialization(self.c.core.read_node(node))
            on_node = self.c.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}"
            )
        except ApiException as exc:
            raise self.c.error(exc, "get", "nodes", f"node {node}") from None
        engine = engine_of_json(as_json["spec"], self.s.engine) or {}
        names = list(accelerators(engine.get("resources") or {}))
        pods_json = [self.c.api.sanitize_for_serialization(p) for p in on_node.items]
        free = free_on_node(node_json, pods_json, names)
        run = self.c.run_dir.name
        pc, preemptor = preemptor_objects(
            run, self.c.ns, as_json, self.s.engine, self.c.k.preemptor_image, free
        )
        allowed = self._pdb_allows()
        self.s.preemptor = {
            "pod": preemptor["metadata"]["name"],
            "priority_class": pc["metadata"]["name"],
        }
        self.mark_pending()  # written down before either exists
        detail = dict(
            pod=victim,
            node=node,
            preemptor=preemptor["metadata"]["name"],
            priority=pc["value"],
            asks=preemptor["spec"]["containers"][0]["resources"]["requests"],
            free=free,
            **allowed,
        )
        self.c.action("preempt", **detail)
        try:
            self.scheduling.create_priority_class(pc)
            create_once_admitted(self.c.core, self.c.ns, preemptor)
        except ApiException as exc:
            raise TargetError(f"making the preemptor: HTTP {exc.status} {_message(exc)}") from None
        return detail

    def _pdb_allows(self) -> dict:
        """The PodDisruptionBudgets over the engine's pods and the disruptions they allowed
        just before the act (pdb: None when none selects them or they cannot be read)."""
        policy = client.PolicyV1Api(self.c.api)
        try:
            pdbs = policy.list_namespaced_pod_disruption_budget(self.c.ns).items
        except ApiException:
            return {"pdb": None, "pdb_unreadable": True}
        labels = self.c.read_deployment().spec.template.metadata.labels or {}
        for p in pdbs:
            sel = (p.spec.selector.match_labels or {}) if p.spec.selector else {}
            if sel and all(labels.get(k) == v for k, v in sel.items()):
                return {"pdb": p.metadata.name, "pdb_allowed": p.status.disruptions_allowed or 0}
        return {"pdb": None}

    def end(self) -> list[str]:
        """Remove the preemptor and its PriorityClass (either may be gone already);
        what was removed."""
        made = self.s.preemptor
        if not made:
            return []
        done = []
        body = client.V1DeleteOptions(grace_period_seconds=0)
        try:
            self.c.core.delete_namespaced_pod(made["pod"], self.c.ns, body=body)
            done.append(f"preemptor pod {made['pod']}")
        except ApiException as exc:
            if exc.status != 404:
                raise self.c.error(exc, "delete", "pods", f"pod {made['pod']}") from None
        try:
            self.scheduling.delete_priority_class(made["priority_class"])
            done.append(f"PriorityClass {made['priority_class']}")
        except ApiException as exc:
            if exc.status != 404:
                raise self.c.error(
                    exc, "delete", "priorityclasses", f"PriorityClass {made['priority_class']}"
                ) from None
        self.s.preemptor = None
        return done


def preempted(pod) -> tuple[float, str] | None:
    """(when, message) of the pod's DisruptionTarget condition set by a preemption."""
    for cond in (pod.status and pod.status.conditions) or []:
        if cond.type == "DisruptionTarget" and cond.status == "True" and cond.reason == PREEMPTED:
            t = cond.last_transition_time
            return (t.timestamp() if t else 0.0), (cond.message or "")
    return None


__all__ = ["Preemption", "accelerators", "free_on_node", "preempted", "preemptor_objects"]
