"""The Kubernetes target: one namespace and one opted-in Deployment, through the official client.

Safety first: the Deployment must carry `rollcheck.io/allow-chaos: "true"`; nothing
outside the namespace is touched (nodes only with `kube.allow_node_drain`);
`kube.dry_run` prints each action instead of taking it; what is changed
(replicas, pod template, strategy, cordons, KEDA pauses) is recorded in an
annotation before the first change and put back on close, even after a failure,
and a run refuses to start while a previous run's restore is pending.
Observation: watches on pods, ReplicaSets, EndpointSlices and events, resumed
after disconnects from the last resourceVersion (410 Gone -> relist), turned
into the same timestamped events as the local target.
"""

from __future__ import annotations

import atexit
import datetime
import json
import os
import signal
import ssl
import threading
import time
from pathlib import Path

import httpx
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

from harness.cluster import (
    CannotRun,
    EvictionRefused,
    PodView,
    Target,
    TargetError,
    evict_retrying,
)
from harness.cluster.config import RunConfig
from harness.cluster.events import Event, EventLog
from harness.cluster.metrics import parse_metrics
from harness.cluster.podspec import prestop_s
from harness.sim.settings import flag_name

OPT_IN = "rollcheck.io/allow-chaos"
RESTORE = "rollcheck.io/restore-pending"
GPU = "nvidia.com/gpu"
KEDA_PAUSE = "autoscaling.keda.sh/paused-replicas"
# (verb, resource, group, subresource) the harness needs in its namespace
NEEDED = [
    ("get", "deployments", "apps", ""),
    ("patch", "deployments", "apps", ""),
    ("patch", "deployments", "apps", "scale"),
    ("list", "pods", "", ""),
    ("watch", "pods", "", ""),
    ("delete", "pods", "", ""),
    ("patch", "pods", "", ""),
    ("create", "pods", "", "eviction"),
    ("get", "pods", "", "proxy"),
    ("list", "replicasets", "apps", ""),
    ("list", "endpointslices", "discovery.k8s.io", ""),
    ("list", "events", "", ""),
]


def _ts(value) -> float:
    if value is None:
        return time.time()
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    return datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


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


class _Watch(threading.Thread):
    """One resource, watched from a resourceVersion; reconnects, and relists on 410."""

    def __init__(self, name: str, lister, on_event, on_relist, namespace: str, **kw):
        super().__init__(name=f"watch-{name}", daemon=True)
        self.lister, self.on_event, self.on_relist = lister, on_event, on_relist
        self.namespace, self.kw = namespace, kw
        self.rv: str | None = None
        self.stopped = threading.Event()
        self.reconnects = 0
        self._w: watch.Watch | None = None
        # an interrupt that lands between two streams (while relisting, or before the
        # next stream has started) is kept, and ends that stream after its next event
        self._break = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                if self.rv is None:
                    listed = self.lister(self.namespace, **self.kw)
                    self.on_relist(listed.items)
                    self.rv = listed.metadata.resource_version
                self._w = watch.Watch()
                for ev in self._w.stream(
                    self.lister,
                    self.namespace,
                    resource_version=self.rv,
                    timeout_seconds=60,
                    **self.kw,
                ):
                    obj = ev["object"]
                    if ev["type"] == "ERROR":  # a Status object, e.g. 410 Gone
                        code = obj.get("code", 410) if isinstance(obj, dict) else 410
                        raise ApiException(status=code)
                    self.rv = obj.metadata.resource_version
                    self.on_event(ev["type"], obj)
                    if self._break.is_set():
                        break
            except ApiException as exc:
                if exc.status == 410:
                    self.rv = None  # too old: relist and diff against what we knew
            except Exception:
                pass
            self._break.clear()
            if not self.stopped.is_set():
                self.reconnects += 1
                self.stopped.wait(0.2)

    def interrupt(self) -> None:
        """Break the current connection (as a network blip would); the watch resumes."""
        self._break.set()
        if self._w is not None:
            self._w.stop()  # the stream ends after its next event, and the watch resumes

    def stop(self) -> None:
        self.stopped.set()
        self.interrupt()


def pod_view(pod, port: int) -> PodView:
    return PodView(
        name=pod.metadata.name,
        version=_version(pod),
        node=pod.spec.node_name,
        address=f"{pod.status.pod_ip}:{port}" if pod.status.pod_ip else None,
        phase=pod.status.phase or "Pending",
        ready=_ready(pod),
        terminating=pod.metadata.deletion_timestamp is not None,
        restarts=sum(c.restart_count for c in (pod.status.container_statuses or [])),
        created_at=_ts(pod.metadata.creation_timestamp),
    )


def _version(pod) -> str:
    labels = pod.metadata.labels or {}
    return labels.get("version") or pod.spec.containers[0].image.rsplit(":", 1)[-1]


class KubeTarget(Target):
    name = "kube"

    def __init__(self, cfg: RunConfig, run_dir: Path, api: client.ApiClient | None = None):
        self.cfg = cfg
        self.k = cfg.kube
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.ns = self.k.namespace
        self.dry_run = self.k.dry_run
        self._api = api
        self._events = EventLog(self.run_dir / "events.jsonl")
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
        ):
            w = _Watch(name, lister, on_event, self._relister(name, on_event), self.ns, **kw)
            self._watches.append(w)
            w.start()
        self._record_original(dep)
        if self.k.gateway_pods_selector and not self.k.gateway_log_files:
            self._stream_gateway_logs()

    def _stream_gateway_logs(self) -> None:
        """Follow the ingress controller pods' logs into gateway/access.log and error.log
        (ingress-nginx writes both to its container output) until close(). A selector that
        finds no pod, or a missing permission, stops the run here in one line."""
        ns, selector = self.k.gateway_pods_namespace, self.k.gateway_pods_selector
        folder = self.run_dir / "gateway"
        folder.mkdir(parents=True, exist_ok=True)
        self._gw_files = (folder / "access.log", folder / "error.log")
        if self._allowed("get", "pods", sub="log", namespace=ns) is False:
            raise TargetError(
                f"RBAC: not allowed to get pods/log in namespace {ns} (the gateway's logs); "
                "grant the Role rollcheck-gateway-logs in deploy/rbac.yaml, or unset "
                "kube.gateway_pods_selector"
            )
        try:
            pods = self.core.list_namespaced_pod(ns, label_selector=selector).items
        except ApiException as exc:
            raise self._error(exc, "list", "pods", f"gateway pods in {ns}") from None
        pods = [p for p in pods if p.status.phase == "Running"]
        if not pods:
            raise TargetError(
                f"kube.gateway_pods_selector {selector!r} matches no running pod in namespace "
                f"{ns} (kube.gateway_pods_namespace); check both, e.g. "
                "app.kubernetes.io/name=ingress-nginx in ingress-nginx"
            )
        self._gw_streams: list = []
        for pod in pods:
            try:
                resp = self.core.read_namespaced_pod_log(
                    pod.metadata.name, ns, follow=True, since_seconds=1, _preload_content=False
                )
            except ApiException as exc:
                raise self._error(exc, "get", "pods/log", f"{ns}/{pod.metadata.name}") from None
            self._gw_streams.append(resp)
            threading.Thread(
                target=self._follow_log,
                args=(resp,),
                daemon=True,
                name=f"gateway-log-{pod.metadata.name}",
            ).start()

    def _follow_log(self, resp) -> None:
        from harness.gateway_logs import ERROR_LINE

        access, error = (open(p, "a") for p in self._gw_files)
        try:
            buf = b""
            for chunk in resp.stream(4096):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for raw in lines:
                    line = raw.decode(errors="replace")
                    (error if ERROR_LINE.match(line) else access).write(line + "\n")
                access.flush()
                error.flush()
        except Exception:
            pass  # closed by close(), or the pod went away: its lines so far are kept
        finally:
            access.close()
            error.close()

    def _stop_gateway_logs(self) -> None:
        for resp in getattr(self, "_gw_streams", []):
            try:
                resp.release_conn()
                resp.close()
            except Exception:
                pass
        self._gw_streams = []

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
                "period_s": float(p.period_seconds or 10),
                "failure_threshold": int(p.failure_threshold or 3),
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
        (self.run_dir / "lint.json").write_text(
            json.dumps([f.to_dict() for f in self.lint_findings], indent=2)
        )

    def _record_original(self, dep) -> None:
        """Before any change: what to put back, kept on the Deployment itself."""
        template = self.api.sanitize_for_serialization(dep.spec.template)
        strategy = self.api.sanitize_for_serialization(dep.spec.strategy)
        self._original = {
            "replicas": dep.spec.replicas,
            "template": template,
            "strategy": strategy,
            "run": self.run_dir.name,
        }

    def _mark_restore_pending(self) -> None:
        """Write (or rewrite) what to put back before changing anything."""
        if self.dry_run:
            return
        self._marked = True
        note = json.dumps(self._original | {"cordoned": self._cordoned})
        self._patch_deployment({"metadata": {"annotations": {RESTORE: note}}})

    def close(self) -> None:
        try:
            if self._original is not None and self._marked:
                self.restore()
        finally:
            self._stop_gateway_logs()
            self._stop_watches()
            self._events.close()

    def _stop_watches(self) -> None:
        for w in self._watches:
            w.stop()
        for w in self._watches:
            w.join(5)

    def restore(self) -> list[str]:
        """Put back replicas, the pod template, the strategy, cordons and KEDA pauses."""
        done: list[str] = []
        orig = self._original
        dep = self.apps.read_namespaced_deployment(self.k.deployment, self.ns)
        current_template = self.api.sanitize_for_serialization(dep.spec.template)
        # the restore-pending record is removed last, once everything it lists is back: a
        # failure on the way leaves it for `rollcheck kube-restore`
        body: dict = {"spec": {}}
        if current_template != orig["template"]:
            body["spec"]["template"] = orig["template"]
            done.append("pod template")
        if self.api.sanitize_for_serialization(dep.spec.strategy) != orig["strategy"]:
            body["spec"]["strategy"] = orig["strategy"]
            done.append("rollout strategy")
        if dep.spec.replicas != orig["replicas"]:
            body["spec"]["replicas"] = orig["replicas"]
            done.append(f"replicas {dep.spec.replicas} -> {orig['replicas']}")
        # a replace of the template: a strategic merge would keep added args and env
        if "template" in body["spec"]:
            dep.spec.template = orig["template"]
            self.apps.patch_namespaced_deployment(
                self.k.deployment,
                self.ns,
                [{"op": "replace", "path": "/spec/template", "value": orig["template"]}],
            )
            del body["spec"]["template"]
        if body["spec"]:
            self._patch_deployment(body)
        for node in list(self._cordoned):
            self.core.patch_node(node, {"spec": {"unschedulable": False}})
            done.append(f"uncordoned {node}")
            self._cordoned.remove(node)
        for so in list(self._keda_paused):
            self._keda_annotate(so, None)
            done.append(f"unpaused ScaledObject {so}")
            self._keda_paused.remove(so)
        self._patch_deployment({"metadata": {"annotations": {RESTORE: None}}})
        self.restored = done
        self._events.emit("restored", what=done)
        if done:
            print(
                f"rollcheck: restored {self.ns}/{self.k.deployment}: {', '.join(done)}", flush=True
            )
        return done

    def _patch_deployment(self, body) -> None:
        try:
            self.apps.patch_namespaced_deployment(self.k.deployment, self.ns, body)
        except ApiException as exc:
            raise self._error(
                exc, "patch", "deployments", f"deployment {self.k.deployment}"
            ) from None

    # --- watches -> events -----------------------------------------------------
    def _relister(self, name: str, on_event):
        def relist(items) -> None:
            if name == "pods":
                seen = {p.metadata.uid for p in items}
                with self._lock:
                    gone = [p for uid, p in self._pods.items() if uid not in seen]
                for p in gone:
                    self._on_pod("DELETED", p)  # missed while disconnected
            for obj in items:
                on_event("ADDED", obj)

        return relist

    def _on_pod(self, kind: str, pod) -> None:
        uid = pod.metadata.uid
        name, node = pod.metadata.name, pod.spec.node_name
        version = _version(pod)
        with self._lock:
            old = self._pods.get(uid)
            if kind == "DELETED":
                self._pods.pop(uid, None)
                if old is not None:
                    self._events.emit("pod_removed", pod=name, node=node, version=version)
                self._capacity_event()
                return
            self._pods[uid] = pod
        emit = self._events.emit
        if (old is None or not old.status.pod_ip) and pod.status.pod_ip:
            emit(
                "pod_created",
                pod=name,
                node=node,
                version=version,
                t=_ts(pod.metadata.creation_timestamp),
                address=f"{pod.status.pod_ip}:{self.port}",
            )
        if old is not None and _ready(old) != _ready(pod):
            emit("ready" if _ready(pod) else "unready", pod=name, node=node, version=version)
        elif old is None and _ready(pod):
            emit("ready", pod=name, node=node, version=version)
        if pod.metadata.deletion_timestamp is not None and (
            old is None or old.metadata.deletion_timestamp is None
        ):
            grace = pod.metadata.deletion_grace_period_seconds or 0
            start = _ts(pod.metadata.deletion_timestamp) - grace
            emit("terminating", pod=name, node=node, version=version, t=start, grace_s=grace)
            prestop = prestop_s(pod.spec.containers[0])
            if prestop and grace > prestop:
                emit("prestop_started", pod=name, node=node, version=version, t=start)
            # The kubelet sends SIGTERM once preStop returns: estimated from the pod spec.
            emit(
                "sigterm",
                pod=name,
                node=node,
                version=version,
                t=start + min(prestop, grace),
                estimated=True,
            )
        restarts = sum(c.restart_count for c in (pod.status.container_statuses or []))
        old_restarts = (
            sum(c.restart_count for c in (old.status.container_statuses or [])) if old else restarts
        )
        if restarts > old_restarts:
            emit("exited", pod=name, node=node, version=version, restarts=restarts)
        self._capacity_event()

    def _capacity_event(self) -> None:
        with self._lock:
            pods = list(self._pods.values())
        live = [p for p in pods if p.metadata.deletion_timestamp is None]
        cap = (sum(1 for p in live if _ready(p)), len(pods))
        if cap != self._capacity:
            self._capacity = cap
            self._events.emit("capacity", ready=cap[0], available=cap[0], pods=cap[1])

    def _on_rs(self, kind: str, rs) -> None:
        if kind == "MODIFIED":
            self._events.emit(
                "replicaset",
                replicaset=rs.metadata.name,
                replicas=rs.spec.replicas,
                ready=rs.status.ready_replicas or 0,
            )

    def _on_slice(self, kind: str, s) -> None:
        svc = (s.metadata.labels or {}).get("kubernetes.io/service-name")
        prev = self._slices
        now = set()
        for ep in s.endpoints or []:
            if ep.conditions is None or ep.conditions.ready:
                pod = ep.target_ref.name if ep.target_ref else None
                for a in ep.addresses:
                    now.add((a, pod))
        before = prev.get(s.metadata.name, set())
        if kind == "DELETED":
            now = set()
        for a, pod in sorted(now - before, key=str):
            self._events.emit("endpoint_added", pod=pod, address=a, service=svc)
        for a, pod in sorted(before - now, key=str):
            self._events.emit("endpoint_removed", pod=pod, address=a, service=svc)
        prev[s.metadata.name] = now

    def _on_k8s_event(self, kind: str, ev) -> None:
        if kind != "ADDED":
            return
        obj = ev.involved_object
        self._events.emit(
            "k8s_event",
            pod=obj.name if obj.kind == "Pod" else None,
            t=_ts(ev.last_timestamp or ev.event_time or ev.metadata.creation_timestamp),
            reason=ev.reason,
            message=(ev.message or "")[:300],
            object=obj.kind,
        )

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

    def pod_metrics(self, name: str) -> dict[str, float]:
        status, text = self._pod_get(name, "metrics")
        return parse_metrics(text) if status == 200 else {}

    def _pod_paths(self) -> list[str]:
        """The ways to reach a pod's engine, the one that last worked first."""
        mode = self.k.pod_access
        if mode != "auto":
            return [mode]
        paths = ["direct", "proxy"] if os.environ.get("KUBERNETES_SERVICE_HOST") else ["proxy"]
        paths += [p for p in ("direct", "proxy") if p not in paths]
        if self._pod_path_ok in paths:
            paths.remove(self._pod_path_ok)
            paths.insert(0, self._pod_path_ok)
        return paths

    def _pod_get(self, name: str, path: str) -> tuple[int | None, str]:
        """GET a pod engine's path: (its HTTP status, body), or (None, "") when no way to
        the pod worked; then `pod_access_problem` says, in one line, what was tried."""
        tried = []
        for way in self._pod_paths():
            if way == "direct":
                with self._lock:
                    pod = next((p for p in self._pods.values() if p.metadata.name == name), None)
                ip = pod.status.pod_ip if pod is not None and pod.status else None
                if not ip:
                    tried.append("pod IP: none assigned")
                    continue
                url = f"http://{ip}:{self.port}/{path}"
                try:
                    r = httpx.get(url, timeout=2.0, headers=self.auth_headers())
                except httpx.HTTPError as exc:
                    tried.append(f"pod IP {ip}:{self.port}: {type(exc).__name__}")
                    continue
                if r.status_code == 404:  # not the engine (it serves both paths): a network
                    tried.append(f"pod IP {ip}:{self.port}: HTTP 404, not an engine")
                    continue
                self._pod_path_ok, self.pod_access_problem = way, None
                return r.status_code, r.text
            try:
                text = self.core.connect_get_namespaced_pod_proxy_with_path(
                    f"{name}:{self.port}", self.ns, path
                )
            except ApiException as exc:
                if exc.status in (401, 403) or exc.status is None:
                    tried.append(
                        f"API server pods proxy: HTTP {exc.status} (needs pods/proxy get)"
                        if exc.status
                        else f"API server pods proxy: {exc.reason}"
                    )
                    continue
                self._pod_path_ok, self.pod_access_problem = way, None
                return exc.status, exc.body or ""  # the engine's own answer, or the API's
            self._pod_path_ok, self.pod_access_problem = way, None
            return 200, text
        self.pod_access_problem = f"engine /{path} of pod {name} unreachable: " + "; ".join(tried)
        return None, ""

    def pod_endpoint(self, name: str) -> tuple[str, dict]:
        """Through the API server's pods proxy (pod IPs are rarely reachable from where
        rollcheck runs), with the kubeconfig's credentials (RBAC: pods/proxy get)."""
        c = self.api.configuration
        url = f"{c.host}/api/v1/namespaces/{self.ns}/pods/{name}:{self.port}/proxy"
        ctx: ssl.SSLContext | bool = False
        if c.verify_ssl:
            ctx = ssl.create_default_context(cafile=c.ssl_ca_cert)
        if c.cert_file and c.key_file:
            if ctx is False:
                ctx = ssl.create_default_context()
                ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            ctx.load_cert_chain(c.cert_file, c.key_file)
        settings: dict = {"verify": ctx}
        token = (c.api_key or {}).get("authorization") or (c.api_key or {}).get("BearerToken")
        if token:
            prefix = (c.api_key_prefix or {}).get("authorization", "")
            settings["headers"] = {"Authorization": f"{prefix} {token}".strip()}
        return url, settings

    def pod_health(self, name: str) -> int | None:
        status, _ = self._pod_get(name, "health")
        return status if status and status < 600 and status != 404 else None

    def busiest_pod(self, min_in_flight: int = 1, timeout_s: float = 30.0):
        try:
            return super().busiest_pod(min_in_flight, timeout_s)
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
        if self.dry_run and kind not in ("steady_state", "recovered", "health_probe"):
            print(f"[dry-run] would {kind} {json.dumps(detail)}", flush=True)
        return self._events.emit("action", action=kind, dry_run=self.dry_run, **detail)

    def wait_for(self, cond, timeout_s, what, poll_s=0.05):
        if self.dry_run:
            return
        super().wait_for(cond, timeout_s, what, poll_s)

    # --- actions -------------------------------------------------------------------
    def _owned_pod(self, name: str) -> PodView:
        for p in self.pods():
            if p.name == name:
                return p
        raise TargetError(f"pod {name!r} is not a pod of {self.ns}/{self.k.deployment}")

    def rollout(self, version, engine=None, max_surge=None, max_unavailable=None, min_ready_s=None):
        self.action(
            "rollout",
            to_version=version,
            engine=engine or {},
            max_surge=max_surge,
            max_unavailable=max_unavailable,
        )
        if self.dry_run:
            return
        self._mark_restore_pending()
        dep = self.apps.read_namespaced_deployment(self.k.deployment, self.ns)
        c = dep.spec.template.spec.containers[0]
        container = {"name": c.name}
        if self.cfg.kube.image:
            container["image"] = self.cfg.kube.image.replace("{version}", version)
        if engine:
            flags = [flag_name(k) for k in engine]
            args = [
                a for a in (c.args or []) if not any(a == f or a.startswith(f + "=") for f in flags)
            ]
            for k, v in engine.items():
                if isinstance(v, bool):  # the simulator's booleans are bare flags
                    args += [flag_name(k)] if v else []
                else:
                    args.append(f"{flag_name(k)}={v}")
            container["args"] = args
        body: dict = {
            "spec": {
                "template": {
                    "metadata": {
                        "labels": {"version": version},
                        "annotations": {"rollcheck.io/rollout": f"{version}-{int(time.time())}"},
                    },
                    "spec": {"containers": [container]},
                }
            }
        }
        if max_surge is not None or max_unavailable is not None:
            ru = {}
            if max_surge is not None:
                ru["maxSurge"] = _int_or_str(max_surge)
            if max_unavailable is not None:
                ru["maxUnavailable"] = _int_or_str(max_unavailable)
            body["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": ru}
        if min_ready_s is not None:
            body["spec"]["minReadySeconds"] = int(min_ready_s)
        self._rolling = True
        self._events.emit("rollout_started", version=version)
        self._patch_deployment(body)

    def rollout_done(self) -> bool:
        if self.dry_run:
            return True
        dep = self.apps.read_namespaced_deployment(self.k.deployment, self.ns)
        s, want = dep.status, dep.spec.replicas or 0
        done = (
            (s.observed_generation or 0) >= dep.metadata.generation
            and (s.updated_replicas or 0) == want
            and (s.available_replicas or 0) == want
            and (s.replicas or 0) == want
        )
        if done and self._rolling:
            self._rolling = False
            self._events.emit("rollout_complete")
        return done and not self._rolling

    def evict_pod(self, name: str, retry_deadline_s: float = 0.0) -> None:
        self._owned_pod(name)
        self.action("evict", pod=name)
        if self.dry_run:
            return
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=self.ns))

        def attempt() -> None:
            try:
                self.core.create_namespaced_pod_eviction(name, self.ns, body)
            except ApiException as exc:
                if exc.status != 429:
                    raise self._error(exc, "create", "pods/eviction", f"pod {name}") from None
                self._events.emit("eviction_refused", pod=name, message=_message(exc))
                raise EvictionRefused(f"evicting {name}: {_message(exc)}") from None
            self._events.emit("evicted", pod=name)

        evict_retrying(attempt, retry_deadline_s, interval_s=1.0)

    def drain_node(self, node: str, retry_deadline_s: float = 30.0) -> list[str]:
        if not self.k.allow_node_drain:
            raise TargetError(
                f"draining node {node} cordons it for every workload: set "
                "kube.allow_node_drain=true to allow it"
            )
        victims = [p.name for p in self.pods() if p.node == node and not p.terminating]
        self.action("drain_node", node=node, pods=victims)
        if not self.dry_run:
            self._mark_restore_pending()
            self._cordoned.append(node)
            self._mark_restore_pending()  # the note names the node before it is cordoned
            self.core.patch_node(node, {"spec": {"unschedulable": True}})
            self._events.emit("cordoned", node=node)
        for name in victims:  # only our Deployment's pods: the rest of the node is not ours
            self.evict_pod(name, retry_deadline_s)
        return victims

    def uncordon(self, node: str) -> None:
        if node in self._cordoned and not self.dry_run:
            self.core.patch_node(node, {"spec": {"unschedulable": False}})
            self._cordoned.remove(node)

    def scale_down(self, pod: str) -> None:
        """One replica fewer, and the ReplicaSet removes `pod`: the lowest
        controller.kubernetes.io/pod-deletion-cost goes first."""
        self._owned_pod(pod)
        dep = self.apps.read_namespaced_deployment(self.k.deployment, self.ns)
        replicas = (dep.spec.replicas or 0) - 1
        self.action("scale_down", pod=pod, replicas=replicas, deletion_cost=-1000)
        if self.dry_run:
            return
        body = {
            "metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "-1000"}}
        }
        try:
            self.core.patch_namespaced_pod(pod, self.ns, body)
        except ApiException as exc:
            raise self._error(exc, "patch", "pods", pod) from None
        self.scale(replicas)

    def scale(self, replicas: int) -> None:
        self.action("scale", replicas=replicas)
        if self.dry_run:
            return
        self._mark_restore_pending()
        for so in self._scaled_objects():
            # KEDA owns the replica count: pause it at the wanted count instead of fighting it.
            self._keda_annotate(so, str(replicas))
            if so not in self._keda_paused:
                self._keda_paused.append(so)
        try:
            self.apps.patch_namespaced_deployment_scale(
                self.k.deployment, self.ns, {"spec": {"replicas": replicas}}
            )
        except ApiException as exc:
            raise self._error(exc, "patch", "deployments/scale", self.k.deployment) from None

    def _scaled_objects(self) -> list[str]:
        try:
            items = self.custom.list_namespaced_custom_object(
                "keda.sh", "v1alpha1", self.ns, "scaledobjects"
            )["items"]
        except ApiException:
            return []  # no KEDA here
        return [
            o["metadata"]["name"]
            for o in items
            if (o.get("spec") or {}).get("scaleTargetRef", {}).get("name") == self.k.deployment
        ]

    def _keda_annotate(self, name: str, value: str | None) -> None:
        self.custom.patch_namespaced_custom_object(
            "keda.sh",
            "v1alpha1",
            self.ns,
            "scaledobjects",
            name,
            {"metadata": {"annotations": {KEDA_PAUSE: value}}},
        )

    def kill_pod(self, name: str, sig: int = signal.SIGKILL) -> None:
        self._owned_pod(name)
        self.action("kill", pod=name, signal=signal.Signals(sig).name)
        if self.dry_run:
            return
        if sig != signal.SIGKILL:
            raise TargetError(
                f"only SIGKILL is supported on the kube target (force delete); "
                f"{signal.Signals(sig).name} would need exec into the container"
            )
        self._delete(name, 0)

    def delete_pod(self, name: str, grace_s: float | None = None) -> None:
        self._owned_pod(name)
        self.action("delete", pod=name, grace_s=grace_s)
        if not self.dry_run:
            self._delete(name, grace_s)

    def _delete(self, name: str, grace_s: float | None) -> None:
        body = client.V1DeleteOptions(
            grace_period_seconds=None if grace_s is None else int(grace_s)
        )
        try:
            self.core.delete_namespaced_pod(name, self.ns, body=body)
        except ApiException as exc:
            raise self._error(exc, "delete", "pods", f"pod {name}") from None

    def set_autoscaler(self, policy: str) -> None:
        """force: scale to the autoscaler's minimum now. wait: hand the replica count back
        to the cluster's own scalers (the KEDA ScaledObjects the harness paused are
        un-paused) and let them act; which scalers were found is on the timeline. With
        none, the scenario cannot test a scaler: CannotRun, before anything changes."""
        if self.k.scale_to_zero == "force":
            self.action("autoscaler", policy=policy, mode="force")
            self.scale(self.cfg.autoscaler.min_replicas)
            return
        blocker = self.autoscaler_blocker()
        if blocker:
            raise CannotRun(blocker)
        keda, hpas = self._scaled_objects(), self._hpas()
        self.action("autoscaler", policy=policy, mode="wait", keda=keda, hpa=hpas)
        if self.dry_run:
            return
        for so in keda:
            self._keda_annotate(so, None)  # KEDA owns the replica count again
            if so in self._keda_paused:
                self._keda_paused.remove(so)
        self._events.emit("autoscaler_handed_back", keda=keda, hpa=hpas)

    def autoscaler_blocker(self) -> str | None:
        if self.k.scale_to_zero != "wait" or self._scaled_objects() or self._hpas():
            return None
        return (
            f"kube.scale_to_zero=wait: no KEDA ScaledObject or HorizontalPodAutoscaler in "
            f"{self.ns} targets deployment {self.k.deployment}; set kube.scale_to_zero=force "
            "or point kube.deployment at a scaled Deployment"
        )

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

    def interrupt_watches(self) -> None:
        """Break every watch connection once (tests the resume path)."""
        for w in self._watches:
            w.interrupt()


def _int_or_str(v):
    text = str(v)
    return text if text.endswith("%") else int(text)


def _message(exc: ApiException) -> str:
    try:
        return json.loads(exc.body).get("message", exc.reason)
    except (TypeError, ValueError):
        return str(exc.reason)


def restore_pending(cfg: RunConfig) -> list[str]:
    """`rollcheck kube-restore`: put back what an interrupted run recorded on the Deployment."""
    api = connect(cfg.kube.kubeconfig, cfg.kube.context)
    apps = client.AppsV1Api(api)
    where = f"{cfg.kube.namespace}/{cfg.kube.deployment}"
    try:
        dep = apps.read_namespaced_deployment(cfg.kube.deployment, cfg.kube.namespace)
    except ApiException as exc:
        if exc.status == 404:
            raise TargetError(
                f"deployment {where} does not exist: nothing to restore (a deleted Deployment "
                "takes its restore record with it); check kube.namespace and kube.deployment"
            ) from None
        raise TargetError(
            f"reading deployment {where}: HTTP {exc.status} {_message(exc)}"
        ) from None
    note = (dep.metadata.annotations or {}).get(RESTORE)
    if not note:
        return []
    t = KubeTarget(cfg, Path("reports") / "kube-restore", api=api)
    t.api, t.apps, t.core = api, apps, client.CoreV1Api(api)
    t.custom = client.CustomObjectsApi(api)
    orig = json.loads(note)
    t._original = {k: orig[k] for k in ("replicas", "template", "strategy", "run")}
    t._cordoned = list(orig.get("cordoned", []))
    t._keda_paused = [so for so in t._scaled_objects()]
    try:
        return t.restore()
    except ApiException as exc:  # the Deployment went away in between, or a node did
        raise TargetError(f"restoring {where}: HTTP {exc.status} {_message(exc)}") from None
