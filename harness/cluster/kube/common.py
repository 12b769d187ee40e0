"""Names, the connection (`Cluster`), the state the parts share (`Shared`) and small
helpers of the Kubernetes target's parts."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

from harness.cluster.target import TargetError
from harness.events import Event, EventLog
from harness.podspec import prestop_sleep_s

if TYPE_CHECKING:
    from harness.config.schema import RunConfig

OPT_IN = "rollcheck.io/allow-chaos"
RESTORE = "rollcheck.io/restore-pending"
# on a weighted canary's candidate pods (harness.cluster.kube.split): the Deployment's name
CANDIDATE_LABEL = "rollcheck.io/candidate-of"
GPU = "nvidia.com/gpu"
KEDA_PAUSE = "autoscaling.keda.sh/paused-replicas"
# KEDA reads its triggers and may scale out, but does not scale in (KEDA >= 2.16)
KEDA_PAUSE_SCALE_IN = "autoscaling.keda.sh/paused-scale-in"
# (verb, resource, group, subresource) the harness needs in its namespace


def _ts(value) -> float:
    if value is None:
        return time.time()
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    return datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def is_candidate(pod) -> bool:
    """Whether the pod is a weighted canary's candidate (by its label)."""
    return CANDIDATE_LABEL in (pod.metadata.labels or {})


def _ready(obj) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (obj.status.conditions or []))


def connect(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    """An API client from a kubeconfig (and context), or in-cluster: one clear error otherwise."""
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            config.load_incluster_config()
            return client.ApiClient()
        except ConfigException as exc:
            raise TargetError(f"in-cluster config failed: {exc}") from None
    path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if not Path(path).exists():
        raise TargetError(
            f"kubeconfig {path} does not exist; pass --kubeconfig=PATH or set KUBECONFIG"
        )
    try:
        return config.new_client_from_config(config_file=path, context=context)
    except ConfigException as exc:
        raise TargetError(f"kubeconfig {path}: {str(exc).splitlines()[0]}") from None


def run_user_command(argv: list[str], key: str, doing: str, timeout_s: float) -> None:
    """Run a command the user gave (kube.<key>, formatted already) on this machine;
    TargetError with its last line when it does not run or fails. doing: what for, in the
    error ("for node n1", "killing pod/container")."""
    if not argv:
        raise TargetError(f"kube.{key} is empty: nothing to run {doing}")
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TargetError(f"kube.{key} ({argv[0]}) did not run {doing}: {exc}") from None
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        raise TargetError(f"kube.{key} exited {r.returncode} {doing}: {tail[0]}")


def _int_or_str(v):
    text = str(v)
    return text if text.endswith("%") else int(text)


def _message(exc: ApiException) -> str:
    try:
        return json.loads(exc.body).get("message", exc.reason)
    except (TypeError, ValueError):
        return str(exc.reason)


_SERIALIZER = client.ApiClient()  # client objects -> the manifest's dict form


def prestop_s(container) -> float:
    """A client container's preStop sleep, read as lint reads a manifest's."""
    return prestop_sleep_s(_SERIALIZER.sanitize_for_serialization(container)) or 0.0


def engine_of(pod_spec, name: str | None):
    """The engine container of a client pod spec (a Deployment's template or a pod), by
    the name the preflight chose: never by position, since a sidecar may come first
    (Istio injects istio-proxy into pods, not into the Deployment's template)."""
    containers = pod_spec.containers or []
    return next((c for c in containers if c.name == name), containers[0] if containers else None)


def engine_status(pod, name: str | None):
    """The engine container's status in a pod, by the same rule as engine_of (by name,
    else the first); None before the kubelet reported any."""
    statuses = (pod.status.container_statuses or []) if pod is not None and pod.status else []
    return next((c for c in statuses if c.name == name), statuses[0] if statuses else None)


class Cluster:
    """The connection and the workload's coordinates, given to each of the Kubernetes
    target's parts: the API clients, the config, the namespace and Deployment, the run
    folder and the event timeline; and the few calls more than one part makes."""

    def __init__(self, api: client.ApiClient, cfg: RunConfig, run_dir: Path, events: EventLog):
        self.api, self.cfg, self.run_dir, self.events = api, cfg, Path(run_dir), events
        self.k = cfg.kube
        self.ns = self.k.namespace
        self.deployment = self.k.deployment
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.discovery = client.DiscoveryV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.autoscaling = client.AutoscalingV2Api(api)

    def emit(self, kind: str, **detail) -> Event:
        return self.events.emit(kind, **detail)

    def action(self, kind: str, **detail) -> Event:
        return self.events.emit("action", action=kind, **detail)

    def error(self, exc: ApiException, verb: str, resource: str, what: str) -> TargetError:
        """One line for a refused or failed API call."""
        if exc.status == 404:
            return TargetError(f"{what} does not exist")
        if exc.status == 403:
            return TargetError(
                f"RBAC: not allowed to {verb} {resource} in namespace {self.ns}: {_message(exc)}"
            )
        return TargetError(f"{what}: HTTP {exc.status} {_message(exc)}")

    def read_deployment(self):
        return self.apps.read_namespaced_deployment(self.deployment, self.ns)

    def patch_deployment(self, body) -> None:
        try:
            self.apps.patch_namespaced_deployment(self.deployment, self.ns, body)
        except ApiException as exc:
            raise self.error(exc, "patch", "deployments", f"deployment {self.deployment}") from None

    def replace_template(self, name: str, template: dict) -> None:
        """A Deployment's pod template put back whole: a replace, as a strategic merge
        would keep the args and env added since."""
        self.apps.patch_namespaced_deployment(
            name, self.ns, [{"op": "replace", "path": "/spec/template", "value": template}]
        )

    def allowed(
        self,
        verb: str,
        resource: str,
        group: str = "",
        sub: str = "",
        ns=True,
        namespace=None,
        name: str | None = None,
    ) -> bool | None:
        """A SelfSubjectAccessReview (of one object when named); None when the cluster does
        not answer them."""
        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    namespace=(namespace or self.ns) if ns else None,
                    verb=verb,
                    resource=resource,
                    group=group,
                    subresource=sub or None,
                    name=name,
                )
            )
        )
        try:
            authz = client.AuthorizationV1Api(self.api)
            return authz.create_self_subject_access_review(review).status.allowed
        except ApiException:
            return None

    def scaled_objects(self, full: bool = False) -> list:
        """The KEDA ScaledObjects targeting the Deployment: names (full: the objects)."""
        try:
            items = self.custom.list_namespaced_custom_object(
                "keda.sh", "v1alpha1", self.ns, "scaledobjects"
            )["items"]
        except ApiException as exc:
            if exc.status == 403:
                raise self.error(exc, "list", "scaledobjects.keda.sh", "ScaledObjects") from None
            return []  # no KEDA here (404: its CRD is not installed)
        mine = [
            o
            for o in items
            if (o.get("spec") or {}).get("scaleTargetRef", {}).get("name") == self.deployment
        ]
        return mine if full else [o["metadata"]["name"] for o in mine]

    def hpas(self, full: bool = False) -> list:
        """The HorizontalPodAutoscalers whose target is the Deployment (names; full: the
        objects as the API's JSON), less those a KEDA ScaledObject owns (KEDA's pause
        holds them). A refused read is one line naming it, never "no scaler"."""
        try:
            items = self.autoscaling.list_namespaced_horizontal_pod_autoscaler(self.ns).items
        except ApiException as exc:
            raise self.error(
                exc, "list", "horizontalpodautoscalers", f"HPAs in {self.ns}"
            ) from None
        mine = [
            self.api.sanitize_for_serialization(h)
            for h in items
            if h.spec.scale_target_ref.kind == "Deployment"
            and h.spec.scale_target_ref.name == self.deployment
            and not any(o.kind == "ScaledObject" for o in h.metadata.owner_references or [])
        ]
        return mine if full else [h["metadata"]["name"] for h in mine]

    def hpa_patch(self, name: str, body) -> None:
        try:
            self.autoscaling.patch_namespaced_horizontal_pod_autoscaler(name, self.ns, body)
        except ApiException as exc:
            raise self.error(
                exc, "patch", "horizontalpodautoscalers", f"HorizontalPodAutoscaler {name}"
            ) from None

    def hpa_put_back(self, name: str, original: dict) -> bool:
        """The HPA's spec and its field managers exactly as recorded (a replace of each,
        in that order: the second changes no field, so it leaves no manager of ours).
        False when the HPA is gone."""
        try:
            self.autoscaling.read_namespaced_horizontal_pod_autoscaler(name, self.ns)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        self.hpa_patch(name, [{"op": "replace", "path": "/spec", "value": original["spec"]}])
        managed = original.get("managedFields")
        if managed:
            self.hpa_patch(
                name, [{"op": "replace", "path": "/metadata/managedFields", "value": managed}]
            )
        return True

    def keda_patch(self, name: str, annotations: dict) -> None:
        self.custom.patch_namespaced_custom_object(
            "keda.sh",
            "v1alpha1",
            self.ns,
            "scaledobjects",
            name,
            {"metadata": {"annotations": annotations}},
        )

    def keda_pause(self, name: str, replicas: str | None) -> None:
        """Pause the ScaledObject at `replicas`, or (None) un-pause it entirely."""
        self.keda_patch(name, {KEDA_PAUSE: replicas, KEDA_PAUSE_SCALE_IN: None})


@dataclass
class Shared:
    """What the parts share while the target runs; each field says who writes it."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    pods: dict = field(default_factory=dict)  # uid -> last pod object: the watches
    port: int = 8000  # the engine's port: Preflight.engine, from the Deployment
    engine: str | None = None  # the engine container's name: Preflight.engine
    original: dict | None = None  # what to put back: Restore.record
    marked: bool = False  # the restore record is on the Deployment: Restore.mark_pending
    cordoned: list[str] = field(default_factory=list)  # nodes: the actions; the restore clears
    keda_paused: list[str] = field(default_factory=list)  # ScaledObjects: the same
    # HPAs held (selectPolicy Disabled, min/max around the count): name -> their spec and
    # managedFields before; Actions.hold_hpas records, hand_back and the restore put back
    hpa_held: dict = field(default_factory=dict)
    # preemption: the preemptor pod and its PriorityClass made (names); Preemption.start
    # writes it, its end() and the restore clear it
    preemptor: dict | None = None
    # node_loss: the node stopped and not yet brought back; NodeLoss writes and clears it
    lost_node: str | None = None
    # weighted_canary, shadow: the HTTPRoute rule's backendRefs and filters before the
    # first change (harness.cluster.kube.route.Route.snapshot); the restore puts them back
    route: dict | None = None
    # weighted_canary: the candidate Deployment made (its name) until it is deleted
    candidate: str | None = None
    # pd_rollout: the prefill role's Deployment as it was (name, template, replicas)
    # before the first change; PrefillRole records it, its put_back and the restore clear it
    prefill: dict | None = None

    def pod(self, name: str):
        """The last pod object of that name the watches saw, or None."""
        with self.lock:
            return next((p for p in self.pods.values() if p.metadata.name == name), None)
