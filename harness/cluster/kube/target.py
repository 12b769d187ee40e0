"""The Kubernetes target, assembled from its parts (see harness/cluster/kube/__init__.py)."""

from __future__ import annotations

import atexit
import threading
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from harness.cluster.kube.actions import Actions
from harness.cluster.kube.common import connect, prestop_s
from harness.cluster.kube.preflight import Preflight
from harness.cluster.kube.restore import Restoring
from harness.cluster.kube.scaling import HARNESS_MANAGER, ScalerObserver
from harness.cluster.kube.watches import Watching, _Watch, pod_view
from harness.cluster.target import PodView, Target, TargetError
from harness.config.schema import RunConfig
from harness.events import Event, EventLog


class KubeTarget(Watching, Preflight, Actions, Restoring, Target):
    name = "kube"

    def __init__(self, cfg: RunConfig, run_dir: Path, api: client.ApiClient | None = None):
        self.cfg = cfg
        self.k = cfg.kube
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.ns = self.k.namespace
        if self.k.dry_run:  # acting for real when asked to dry-run: never
            raise TargetError(
                "kube.dry_run: build the target with harness.dryrun.kube_target(), "
                "which puts a DryRunTarget in front of it"
            )
        self._api = api
        self._events = EventLog(self.run_dir / "events.jsonl")
        self.scaling = ScalerObserver(self._events.emit, self.k.deployment)
        self._pods: dict[str, object] = {}  # uid -> last pod
        self._lock = threading.RLock()
        self._watches: list[_Watch] = []
        self._original: dict | None = None
        self._cordoned: list[str] = []
        self._keda_paused: list[str] = []
        self._pod_path_ok: str | None = None  # direct or proxy: the way that last worked
        self.pod_access_problem: str | None = None  # what was tried when no way worked
        self._rolling = False
        self._capacity = None
        self._slices: dict[str, set] = {}
        self._marked = False
        self.restored: list[str] = []
        self.lint_findings: list = []
        self.port = 8000

    # --- lifecycle ---------------------------------------------------------------
    def start(self) -> None:
        self.api = self._api or connect(self.k.kubeconfig, self.k.context)
        # the harness's own writes carry its name (managedFields), so the replica
        # changes that are not its own can be told apart and named
        self.api.user_agent = f"{HARNESS_MANAGER}/1"
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.policy = client.PolicyV1Api(self.api)
        self.discovery = client.DiscoveryV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        dep = self._preflight()
        self._lint(dep)
        c = dep.spec.template.spec.containers[0]
        if c.ports:
            self.port = int(c.ports[0].container_port)
        selector = self.k.selector or ",".join(
            f"{k}={v}" for k, v in (dep.spec.selector.match_labels or {}).items()
        )
        self._selector = selector
        # Watches left running at interpreter exit would log from daemon threads while
        # Python shuts down, which can abort the process: stop them first.
        atexit.register(self._stop_watches)
        for name, lister, on_event, kw in (
            ("pods", self.core.list_namespaced_pod, self._on_pod, {"label_selector": selector}),
            (
                "replicasets",
                self.apps.list_namespaced_replica_set,
                self._on_rs,
                {"label_selector": selector},
            ),
            ("endpointslices", self.discovery.list_namespaced_endpoint_slice, self._on_slice, {}),
            ("events", self.core.list_namespaced_event, self._on_k8s_event, {}),
            (
                "deployment",
                self.apps.list_namespaced_deployment,
                self._as_dict(self.scaling.on_deployment),
                {"field_selector": f"metadata.name={self.k.deployment}"},
            ),
            *self._hpa_watch(),
        ):
            w = _Watch(name, lister, on_event, self._relister(name, on_event), self.ns, **kw)
            self._watches.append(w)
            w.start()
        self._record_original(dep)
        scalers = self.workload_scalers()
        if scalers:
            self._events.emit("workload_scalers", names=scalers)
        if self.k.gateway_pods_selector and not self.k.gateway_log_files:
            self._stream_gateway_logs()

    def _as_dict(self, on_event):
        """A watch callback fed the object as the API's JSON (the observer's input)."""
        return lambda kind, obj: on_event(kind, self.api.sanitize_for_serialization(obj))

    def _hpa_watch(self) -> list[tuple]:
        """The HPAs' watch, where the harness may list them (RBAC autoscaling list/watch)."""
        hpas = client.AutoscalingV2Api(self.api)
        try:
            hpas.list_namespaced_horizontal_pod_autoscaler(self.ns, limit=1)
        except ApiException:
            return []
        on_hpa = self._as_dict(self.scaling.on_hpa)
        return [("hpas", hpas.list_namespaced_horizontal_pod_autoscaler, on_hpa, {})]

    def close(self) -> None:
        try:
            if self._original is not None and self._marked:
                self.restore()
        finally:
            self._stop_gateway_logs()
            self._stop_watches()
            self._events.close()

    # --- observation -------------------------------------------------------------
    @property
    def gateway_url(self) -> str:
        if not self.k.gateway_url:
            raise TargetError("kube.gateway_url is not set: the URL clients use (the ingress)")
        return self.k.gateway_url

    def pods(self) -> list[PodView]:
        with self._lock:
            return [pod_view(p, self.port) for p in self._pods.values()]

    def events(self) -> list[Event]:
        return sorted(self._events.all(), key=lambda e: e.t)

    def prestop_s(self, name: str) -> float:
        with self._lock:
            pod = next((p for p in self._pods.values() if p.metadata.name == name), None)
        return prestop_s(pod.spec.containers[0]) if pod is not None else 0.0

    def busiest_pod(self, min_in_flight: int = 1, timeout_s: float = 30.0, prefer=None):
        try:
            return super().busiest_pod(min_in_flight, timeout_s, prefer)
        except TargetError as exc:
            if self.pod_access_problem:  # the pods were never read: say how it was tried
                raise TargetError(f"{exc}; {self.pod_access_problem}") from None
            raise

    def gateway_logs(self):
        if getattr(self, "_gw_files", None):
            return self._gw_files
        files = self.k.gateway_log_files
        access = Path(files[0]) if files else None
        error = Path(files[1]) if len(files) > 1 else None
        return access, error

    def action(self, kind: str, **detail) -> Event:
        return self._events.emit("action", action=kind, **detail)
