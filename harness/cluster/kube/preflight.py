"""The Kubernetes target's checks before acting: opt-in, RBAC, lint, what cannot run here."""

from __future__ import annotations

import json

from kubernetes import client
from kubernetes.client.rest import ApiException

from harness.cluster.kube.common import GPU, NEEDED, OPT_IN, RESTORE, _message
from harness.cluster.podspec import DEFAULT_FAILURE_THRESHOLD, DEFAULT_PERIOD_S
from harness.cluster.target import TargetError
from harness.files import write_atomic


class Preflight:
    """Before acting: the opt-in, permissions, lint of the Deployment, and what this
    cluster cannot do (node drains, GPUs for surge pods, a scaler to hand over to)."""

    def _preflight(self):
        try:
            self.core.read_namespace(self.ns)
        except ApiException as exc:
            raise self._error(exc, "get", "namespaces", f"namespace {self.ns!r}") from None
        except Exception as exc:  # unreachable API server
            raise TargetError(
                f"cannot reach the API server: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:200]}"
            ) from None
        self._check_access()
        try:
            dep = self.apps.read_namespaced_deployment(self.k.deployment, self.ns)
        except ApiException as exc:
            raise self._error(
                exc, "get", "deployments", f"deployment {self.ns}/{self.k.deployment}"
            ) from None
        labels = dep.metadata.labels or {}
        if labels.get(OPT_IN) != "true":
            raise TargetError(
                f"deployment {self.ns}/{self.k.deployment} has not opted in to chaos: add the label "
                f"{OPT_IN}=true (kubectl label deployment {self.k.deployment} -n {self.ns} "
                f"{OPT_IN}=true)"
            )
        pending = (dep.metadata.annotations or {}).get(RESTORE)
        if pending:
            raise TargetError(
                f"deployment {self.ns}/{self.k.deployment} still has a restore pending from a previous "
                f"run ({json.loads(pending).get('run', '?')}); run `rollcheck kube-restore` with the "
                "same --kubeconfig/--set kube.* options, then try again"
            )
        return dep

    def _allowed(
        self, verb: str, resource: str, group: str = "", sub: str = "", ns=True, namespace=None
    ):
        """A SelfSubjectAccessReview; None when the cluster does not answer them."""
        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    namespace=(namespace or self.ns) if ns else None,
                    verb=verb,
                    resource=resource,
                    group=group,
                    subresource=sub or None,
                )
            )
        )
        try:
            authz = client.AuthorizationV1Api(self.api)
            return authz.create_self_subject_access_review(review).status.allowed
        except ApiException:
            return None

    def node_drain_blocker(self) -> str | None:
        if not self.k.allow_node_drain:
            return (
                "draining a node cordons it for every workload on it: set "
                "kube.allow_node_drain=true to allow it"
            )
        if self._allowed("patch", "nodes", ns=False) is False:
            return (
                "RBAC: not allowed to patch nodes (cordon); bind the ClusterRole "
                "rollcheck-node-drain in deploy/rbac.yaml to the harness's identity"
            )
        return None

    def free_gpus(self) -> tuple[int, int] | None:
        """nvidia.com/gpu allocatable on schedulable nodes, minus what running pods request."""
        dep = self.apps.read_namespaced_deployment(self.k.deployment, self.ns)
        per_pod = sum(
            int(str(((c.resources and c.resources.limits) or {}).get(GPU, 0)))
            for c in dep.spec.template.spec.containers
        )
        if not per_pod:
            return None
        try:
            nodes = [n for n in self.core.list_node().items if not n.spec.unschedulable]
            pods = self.core.list_pod_for_all_namespaces(field_selector="status.phase!=Succeeded")
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
        return self.cfg.kube.image.replace("{version}", version) if self.cfg.kube.image else None

    def candidate_problem(self, version: str, engine: dict, key: str) -> str | None:
        problem = super().candidate_problem(version, engine, key)
        if problem or engine:
            return problem
        dep = self.apps.read_namespaced_deployment(self.k.deployment, self.ns)
        current = dep.spec.template.spec.containers[0].image
        image = self.candidate_image(version) or current
        if image != current:
            return None
        why = "kube.image is not set" if not self.cfg.kube.image else f"kube.image gives {image}"
        return (
            f"{why}: a rollout to {version} would change nothing in the pod template of "
            f"deployment/{self.k.deployment} but its version label, and restart the baseline's "
            f"image {current}; set kube.image to the candidate's image, e.g. "
            "registry/vllm-openai:{version} (with version and next_version its tags)"
        )

    def scaler(self) -> str:
        return self.k.scaler

    def autoscaler_blocker(self, to_zero: bool = False) -> str | None:
        """kube.scaler=cluster: why the Deployment's own scaler cannot be handed the count
        (none targets it; with to_zero, none of them ever goes to zero)."""
        if self.k.scaler != "cluster":
            return None
        where = f"{self.ns} targets deployment {self.k.deployment}"
        keda, hpas = self._scaled_objects(full=True), self._hpas()
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
                f"{self.k.deployment} to zero ({held}), so no answer can be cut that way; set "
                "kube.scaler=harness to force the count to zero"
            )
        return None

    def _scaled_objects(self, full: bool = False) -> list:
        """The KEDA ScaledObjects targeting this Deployment: names (full: the objects)."""
        try:
            items = self.custom.list_namespaced_custom_object(
                "keda.sh", "v1alpha1", self.ns, "scaledobjects"
            )["items"]
        except ApiException:
            return []  # no KEDA here
        mine = [
            o
            for o in items
            if (o.get("spec") or {}).get("scaleTargetRef", {}).get("name") == self.k.deployment
        ]
        return mine if full else [o["metadata"]["name"] for o in mine]

    def _hpas(self) -> list[str]:
        """HorizontalPodAutoscalers whose target is this Deployment."""
        try:
            items = (
                client.AutoscalingV2Api(self.api)
                .list_namespaced_horizontal_pod_autoscaler(self.ns)
                .items
            )
        except ApiException:
            return []
        return [
            h.metadata.name
            for h in items
            if h.spec.scale_target_ref.kind == "Deployment"
            and h.spec.scale_target_ref.name == self.k.deployment
        ]

    def _check_access(self) -> None:
        for verb, resource, group, sub in NEEDED:
            allowed = self._allowed(verb, resource, group, sub)
            if allowed is None:
                return  # the cluster does not answer access reviews: find out when acting
            if not allowed:
                what = f"{resource}/{sub}" if sub else resource
                raise TargetError(
                    f"RBAC: not allowed to {verb} {what} in namespace {self.ns}; "
                    "grant the Role in deploy/rbac.yaml to the harness's identity"
                )

    def _error(self, exc: ApiException, verb: str, resource: str, what: str) -> TargetError:
        if exc.status == 404:
            return TargetError(f"{what} does not exist")
        if exc.status == 403:
            return TargetError(
                f"RBAC: not allowed to {verb} {resource} in namespace {self.ns}: {_message(exc)}"
            )
        return TargetError(f"{what}: HTTP {exc.status} {_message(exc)}")

    def pod_probes(self) -> dict:
        """The engine container's startup and liveness probes, as the live Deployment has
        them ({period_s, failure_threshold} or None)."""
        dep = self.apps.read_namespaced_deployment(self.k.deployment, self.ns)
        c = dep.spec.template.spec.containers[0]

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
        self._lint(self.apps.read_namespaced_deployment(self.k.deployment, self.ns), min_startup_s)

    def _lint(self, dep, min_startup_s: float = 0.0) -> None:
        from harness import lint

        obj = self.api.sanitize_for_serialization(dep)
        manifests = [lint.Manifest(obj, f"live:{self.ns}/{self.k.deployment}", 1, 1)]
        try:
            for pdb in self.policy.list_namespaced_pod_disruption_budget(self.ns).items:
                pobj = self.api.sanitize_for_serialization(pdb)
                pobj.update(kind="PodDisruptionBudget")
                manifests.append(lint.Manifest(pobj, "live", 1, 1))
        except ApiException:
            pass
        obj.update(kind="Deployment")
        try:
            self.lint_findings = lint.lint(manifests, lint.LintOptions(min_startup_s=min_startup_s))
        except lint.LintInputError:
            self.lint_findings = []
        write_atomic(
            self.run_dir / "lint.json",
            json.dumps([f.to_dict() for f in self.lint_findings], indent=2),
        )
