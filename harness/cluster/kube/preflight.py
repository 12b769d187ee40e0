"""The Kubernetes target's checks before acting: opt-in, RBAC, lint, what cannot run here."""

from __future__ import annotations

import json

from kubernetes import client
from kubernetes.client.rest import ApiException

from harness.cluster.kube import access
from harness.cluster.kube.common import GPU, OPT_IN, RESTORE, Cluster, Shared, engine_of
from harness.cluster.kube.owners import owner_of
from harness.cluster.target import CannotRun, TargetError
from harness.files import write_atomic
from harness.podspec import (
    DEFAULT_FAILURE_THRESHOLD,
    DEFAULT_PERIOD_S,
    EngineContainer,
    NoEngineContainer,
    engine_container,
)


class Preflight:
    """Before acting: the opt-in, permissions, lint of the Deployment, and what this
    cluster cannot do (node drains, GPUs for surge pods, a scaler to hand over to)."""

    def __init__(self, c: Cluster, shared: Shared, kind: str | None = None):
        self.c, self.s = c, shared
        self.kind = kind  # the scenario's kind: which permissions it needs
        self.lint_findings: list = []

    def check(self):
        """The Deployment, once the namespace, the permissions, the opt-in and the absence
        of a pending restore allow acting on it."""
        try:
            self.c.core.read_namespace(self.c.ns)
        except ApiException as exc:
            raise self.c.error(exc, "get", "namespaces", f"namespace {self.c.ns!r}") from None
        except Exception as exc:  # unreachable API server
            raise TargetError(
                f"cannot reach the API server: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:200]}"
            ) from None
        self.check_access()
        self.check_kill_means()
        try:
            dep = self.c.apps.read_namespaced_deployment(self.c.deployment, self.c.ns)
        except ApiException as exc:
            raise self.c.error(
                exc, "get", "deployments", f"deployment {self.c.ns}/{self.c.deployment}"
            ) from None
        labels = dep.metadata.labels or {}
        if labels.get(OPT_IN) != "true":
            raise TargetError(
                f"deployment {self.c.ns}/{self.c.deployment} has not opted in to chaos: add the label "
                f"{OPT_IN}=true (kubectl label deployment {self.c.deployment} -n {self.c.ns} "
                f"{OPT_IN}=true)"
            )
        self.check_owner(dep)
        pending = (dep.metadata.annotations or {}).get(RESTORE)
        if pending:
            raise TargetError(
                f"deployment {self.c.ns}/{self.c.deployment} still has a restore pending from a previous "
                f"run ({json.loads(pending).get('run', '?')}); run `rollcheck kube-restore` with the "
                "same --kubeconfig/--set kube.* options, then try again"
            )
        return dep

    def check_kill_means(self) -> None:
        """pod_kill SIGKILLs the engine's container by the means the user gives
        (kube.kill_command): the API offers none. A deletion with grace 0 is not one: the
        kubelet turns it into SIGTERM and SIGKILL 2 s later, a 2 s drain (measured on
        kube-local: a healthy pod_kill then broke no stream in 4 of 4 runs)."""
        k = self.c.cfg.kube
        if self.kind == "pod_kill" and k.pod_kill == "command" and not k.kill_command:
            raise CannotRun(
                "pod_kill needs a way to SIGKILL the engine's container, which the "
                "Kubernetes API does not offer: set kube.kill_command (a command that kills "
                "it through its node's container runtime; `rollcheck kube-local` prints "
                "its own), or kube.pod_kill: delete for a deletion with grace 0, which the "
                "kubelet turns into a 2 s drain"
            )

    def check_owner(self, dep) -> None:
        """A Deployment another controller owns has every change reverted mid-run: refused
        in one line naming the owner, unless kube.allow_owned (then a WARNING)."""
        meta = self.c.api.sanitize_for_serialization(dep.metadata)
        owner = owner_of(meta)
        if owner is None:
            return
        where = f"deployment {self.c.ns}/{self.c.deployment}"
        if not self.c.k.allow_owned:
            raise TargetError(
                f"{where} is managed by {owner.name}: {owner.how}, so it would revert every "
                f"change mid-run; {owner.fix}, or set kube.allow_owned=true to act anyway"
            )
        self.c.emit("owned", owner=owner.name, how=owner.how)
        print(
            f"rollcheck: WARNING: {where} is managed by {owner.name} ({owner.how}); acting "
            "on it anyway (kube.allow_owned=true): changes may be reverted mid-run",
            flush=True,
        )

    def engine(self, dep) -> EngineContainer:
        """Which container of the Deployment's pods is the engine, and why (an event); its
        name and port go to the shared state, where every part reads them."""
        template = self.c.api.sanitize_for_serialization(dep.spec.template)
        labels = (template.get("metadata") or {}).get("labels") or {}
        services, note = [], ""
        try:
            for svc in self.c.core.list_namespaced_service(self.c.ns).items:
                selector = svc.spec.selector or {}
                if selector and all(labels.get(k) == v for k, v in selector.items()):
                    services += [
                        (svc.metadata.name, p.target_port or p.port) for p in svc.spec.ports or []
                    ]
        except ApiException as exc:
            if exc.status != 403:
                raise self.c.error(exc, "list", "services", f"services in {self.c.ns}") from None
            note = " (Services not read: RBAC list services)"
        try:
            choice = engine_container(template.get("spec") or {}, self.c.k.container, services)
        except NoEngineContainer as exc:
            raise TargetError(f"deployment {self.c.ns}/{self.c.deployment}: {exc}") from None
        self.c.emit(
            "engine_container",
            container=choice.name,
            port=choice.port,
            why=choice.why + note,
            containers=len(template["spec"]["containers"]),
        )
        self.s.engine = choice.name
        if choice.port is not None:
            self.s.port = choice.port
        return choice

    def node_drain_blocker(self) -> str | None:
        if not self.c.k.allow_node_drain:
            return (
                "draining a node cordons it for every workload on it: set "
                "kube.allow_node_drain=true to allow it"
            )
        if self.c.allowed("patch", "nodes", ns=False) is False:
            return (
                "RBAC: not allowed to patch nodes (cordon), needed by drain (node); install "
                "the chart with rbac.nodeDrain=true (a ClusterRole with get and patch on nodes)"
            )
        return None

    def free_gpus(self) -> tuple[int, int] | None:
        """nvidia.com/gpu allocatable on schedulable nodes, minus what running pods request."""
        dep = self.c.apps.read_namespaced_deployment(self.c.deployment, self.c.ns)
        per_pod = sum(
            int(str(((c.resources and c.resources.limits) or {}).get(GPU, 0)))
            for c in dep.spec.template.spec.containers
        )
        if not per_pod:
            return None
        try:
            nodes = [n for n in self.c.core.list_node().items if not n.spec.unschedulable]
            pods = self.c.core.list_pod_for_all_namespaces(field_selector="status.phase!=Succeeded")
        except ApiException:
            return None  # no permission to look: find out when acting
        names = {n.metadata.name for n in nodes}
        free = sum(int(str((n.status.allocatable or {}).get(GPU, 0))) for n in nodes)
        for p in pods.items:
            if p.spec.node_name in names and p.status.phase != "Failed":
                for c in p.spec.containers:
                    free -= int(str(((c.resources and c.resources.requests) or {}).get(GPU, 0)))
        return max(0, free), per_pod

    def candidate_image(self, version: str) -> str | None:
        return (
            self.c.cfg.kube.image.replace("{version}", version) if self.c.cfg.kube.image else None
        )

    def image_problem(self, version: str) -> str | None:
        """Why a rollout to `version` with no engine change would change nothing but the
        version label (kube.image unset, or giving the baseline's image); None if not."""
        dep = self.c.apps.read_namespaced_deployment(self.c.deployment, self.c.ns)
        current = engine_of(dep.spec.template.spec, self.s.engine).image
        image = self.candidate_image(version) or current
        if image != current:
            return None
        why = "kube.image is not set" if not self.c.cfg.kube.image else f"kube.image gives {image}"
        return (
            f"{why}: a rollout to {version} would change nothing in the pod template of "
            f"deployment/{self.c.deployment} but its version label, and restart the baseline's "
            f"image {current}; set kube.image to the candidate's image, e.g. "
            "registry/vllm-openai:{version} (with version and next_version its tags)"
        )

    def scaler(self) -> str:
        return self.c.k.scaler

    def autoscaler_blocker(self, to_zero: bool = False) -> str | None:
        """kube.scaler=cluster: why the Deployment's own scaler cannot be handed the count
        (none targets it; with to_zero, none of them ever goes to zero)."""
        if self.c.k.scaler != "cluster":
            return None
        where = f"{self.c.ns} targets deployment {self.c.deployment}"
        keda, hpas = self.c.scaled_objects(full=True), self.c.hpas()
        if not keda and not hpas:
            return (
                f"kube.scaler=cluster: no KEDA ScaledObject or HorizontalPodAutoscaler in "
                f"{where}; set kube.scaler=harness to have rollcheck play the scaler, or point "
                "kube.deployment at a scaled Deployment"
            )
        if to_zero and not any(
            (so.get("spec") or {}).get("minReplicaCount", 0) == 0 for so in keda
        ):
            held = (
                ", ".join(
                    f"ScaledObject {so['metadata']['name']} keeps minReplicaCount "
                    f"{so['spec'].get('minReplicaCount')}"
                    for so in keda
                )
                or f"HorizontalPodAutoscaler {', '.join(hpas)} stops at minReplicas >= 1"
            )
            return (
                f"kube.scaler=cluster: the cluster's scaler never takes deployment "
                f"{self.c.deployment} to zero ({held}), so no answer can be cut that way; set "
                "kube.scaler=harness to force the count to zero"
            )
        return None

    def check_access(self) -> None:
        """Every permission this scenario will use (access.PERMISSIONS), asked before
        anything is touched: one line per missing one; an error when every scenario needs
        it, SKIPPED when only this scenario's kind does."""
        c = self.c

        def allowed(p: access.Permission) -> bool | None:
            name = c.deployment if p.named else None
            return c.allowed(p.verb, p.resource, p.group, p.sub, name=name)

        found = access.missing(allowed, access.kinds_of(self.kind, c.cfg.kube.pod_kill))
        if found is None:
            return  # the cluster does not answer access reviews: find out when acting
        base, own = found
        lines = [access.line(p, c.ns) for p in base]
        # the Deployment's own scalers, which every scenario holds: asked by name
        for kind, resource, group, names, value in (
            ("HorizontalPodAutoscaler", "horizontalpodautoscalers", "autoscaling",
             c.hpas() if not base else [], "target.hpas"),
            ("ScaledObject", "scaledobjects", "keda.sh",
             c.scaled_objects() if not base else [], "target.scaledObjects"),
        ):  # fmt: skip
            for name in names:
                if c.allowed("patch", resource, group, name=name) is False:
                    lines.append(access.scaler_line(kind, name, c.ns, value))
        if lines:
            raise TargetError("\n".join(lines + [access.line(p, c.ns) for p in own]))
        if own:
            raise CannotRun("\n".join(access.line(p, c.ns) for p in own))

    def pod_probes(self) -> dict:
        """The engine container's startup and liveness probes, as the live Deployment has
        them ({period_s, failure_threshold} or None)."""
        dep = self.c.apps.read_namespaced_deployment(self.c.deployment, self.c.ns)
        c = engine_of(dep.spec.template.spec, self.s.engine)

        def window(p):
            if p is None:
                return None
            return {
                "period_s": float(p.period_seconds or DEFAULT_PERIOD_S),
                "failure_threshold": int(p.failure_threshold or DEFAULT_FAILURE_THRESHOLD),
            }

        return {"startup": window(c.startup_probe), "liveness": window(c.liveness_probe)}

    def relint(self, min_startup_s: float) -> None:
        """The preflight rules again, with the start-up time this run observed (RC002)."""
        self.lint(
            self.c.apps.read_namespaced_deployment(self.c.deployment, self.c.ns), min_startup_s
        )

    def lint(self, dep, min_startup_s: float = 0.0) -> None:
        from harness import lint

        obj = self.c.api.sanitize_for_serialization(dep)
        manifests = [lint.Manifest(obj, f"live:{self.c.ns}/{self.c.deployment}", 1, 1)]
        try:
            for pdb in self.c.policy.list_namespaced_pod_disruption_budget(self.c.ns).items:
                pobj = self.c.api.sanitize_for_serialization(pdb)
                pobj.update(kind="PodDisruptionBudget")
                manifests.append(lint.Manifest(pobj, "live", 1, 1))
        except ApiException:
            pass
        try:  # the cluster's PriorityClasses (cluster-wide; RC020 without them where refused)
            scheduling = client.SchedulingV1Api(self.c.api)
            for pc in scheduling.list_priority_class().items:
                if (pc.metadata.labels or {}).get("app.kubernetes.io/managed-by") == "rollcheck":
                    continue  # a preemption's own, of a run beside this one
                pobj = self.c.api.sanitize_for_serialization(pc)
                pobj.update(kind="PriorityClass")
                manifests.append(lint.Manifest(pobj, "live", 1, 1))
        except ApiException:
            pass
        obj.update(kind="Deployment")
        try:
            opts = lint.LintOptions(min_startup_s=min_startup_s, engine_name=self.s.engine)
            self.lint_findings = lint.lint(manifests, opts)
        except lint.LintInputError:
            self.lint_findings = []
        write_atomic(
            self.c.run_dir / "lint.json",
            json.dumps([f.to_dict() for f in self.lint_findings], indent=2),
        )
