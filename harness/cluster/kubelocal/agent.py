"""The node agent: the kubelet's contract for pods whose container is the simulator.

Registers Nodes (cpu, memory, pods, nvidia.com/gpu) and keeps their Leases and
Ready condition fresh; watches pods bound to its nodes; gives each pod a
loopback address; runs the container through the local target's PodRunner
(probes, restarts, preStop, SIGTERM, SIGKILL at the grace deadline); reports
phase, conditions, podIP, container states and restart counts; and completes a
deletion once the container is gone. Any image but the simulator's is refused
with a pod event.
"""

from __future__ import annotations

import datetime
import re
import sys
import threading
import time
from pathlib import Path

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from harness.cluster.config import PodSettings, Probe
from harness.cluster.kubelocal.kubeletlogs import LOG_FILE_ANNOTATION, KubeletLogServer
from harness.cluster.kubelocal.podnet import PodNetwork
from harness.cluster.local.kubelet import PodRunner, PodSpec
from harness.cluster.podspec import prestop_s
from harness.events import EventLog
from harness.files import open_append

SIM_IMAGE = re.compile(r"(^|/)rollcheck[/-]sim(:|@|$)")
LEASE_S = 40
RENEW_S = 5


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _probe(p, default_path: str = "/health") -> Probe | None:
    if p is None:
        return None
    path = p.http_get.path if p.http_get and p.http_get.path else default_path
    return Probe(
        period_s=float(p.period_seconds or 10),
        failure_threshold=int(p.failure_threshold or 3),
        timeout_s=float(p.timeout_seconds or 1),
        initial_delay_s=float(p.initial_delay_seconds or 0),
        path=path,
    )


def pod_settings(pod) -> PodSettings:
    c = pod.spec.containers[0]
    grace = pod.spec.termination_grace_period_seconds
    return PodSettings(
        prestop_s=prestop_s(c),
        termination_grace_s=float(30 if grace is None else grace),
        startup_probe=_probe(c.startup_probe),
        readiness_probe=_probe(c.readiness_probe) or Probe(period_s=1.0, failure_threshold=1),
        liveness_probe=_probe(c.liveness_probe),
        restart_backoff_s=1.0,
    )


class NodeAgent:
    def __init__(
        self,
        api: client.ApiClient,
        nodes: list[str],
        run_dir: Path,
        gpus_per_node: int = 8,
        events: EventLog | None = None,
        net: PodNetwork | None = None,
        tls: tuple[Path, Path] | None = None,
    ):
        self.core = client.CoreV1Api(api)
        self.coord = client.CoordinationV1Api(api)
        self.nodes = nodes
        self.gpus = gpus_per_node
        self.dir = Path(run_dir) / "pods"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.events = events or EventLog()
        self.runners: dict[str, PodRunner] = {}  # pod uid -> runner
        self.pods: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name)
        self._reported: dict[str, dict] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._dirty = threading.Event()
        self.net = net or PodNetwork()
        self.pod_ips: dict[str, str] = {}  # uid -> pod IP
        # the kubelet's log endpoint (pods/log), served with the given certificate
        self.logs = KubeletLogServer(self.log_file, *tls) if tls else None
        self._threads = [
            threading.Thread(target=self._leases, name="agent-leases", daemon=True),
            threading.Thread(target=self._watch_pods, name="agent-watch", daemon=True),
            threading.Thread(target=self._sync_status, name="agent-status", daemon=True),
        ]

    # --- nodes -------------------------------------------------------------------
    def start(self) -> NodeAgent:
        if self.logs is not None:
            self.logs.start()
            self.net.allow_kubelet("127.0.0.1", self.logs.port)
        for name in self.nodes:
            self._register(name)
        for t in self._threads:
            t.start()
        return self

    def _register(self, name: str) -> None:
        body = client.V1Node(
            metadata=client.V1ObjectMeta(
                name=name,
                labels={
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "rollcheck.io/node-agent": "true",
                },
            )
        )
        try:
            self.core.create_node(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
        self._node_status(name)

    def _node_status(self, name: str) -> None:
        now = _now().isoformat()
        capacity = {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(self.gpus)}
        status = {
            "capacity": capacity,
            "allocatable": capacity,
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "rollcheck node agent is posting ready status",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.logs.port if self.logs else 0}},
            "nodeInfo": {
                "kubeletVersion": "v1.35.4-rollcheck",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "rollcheck://process",
                "kernelVersion": "",
                "osImage": "rollcheck node agent",
                "machineID": name,
                "systemUUID": name,
                "bootID": name,
            },
        }
        self.core.patch_node_status(name, {"status": status})

    def _leases(self) -> None:
        # Both heartbeats, each on its own: the node lifecycle controller marks a node
        # (and every pod on it) NotReady when neither arrives within its grace period.
        while not self._stop.is_set():
            for name in self.nodes:
                for beat in (self._renew, self._node_status):
                    try:
                        beat(name)
                    except Exception:  # the API may be going away at shutdown
                        if not self._stop.is_set():
                            self._log_exception(f"heartbeat of {name}")
            self._stop.wait(RENEW_S)

    def _renew(self, name: str) -> None:
        # A merge patch: a replace would need the lease's current resourceVersion.
        renew = {
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": LEASE_S,
                "renewTime": _now().strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            }
        }
        try:
            self.coord.patch_namespaced_lease(name, "kube-node-lease", renew)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = {"metadata": {"name": name, "namespace": "kube-node-lease"}} | renew
            self.coord.create_namespaced_lease("kube-node-lease", body)

    # --- pods ----------------------------------------------------------------------
    def _watch_pods(self) -> None:
        rv = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    listed = self.core.list_pod_for_all_namespaces()
                    for pod in listed.items:
                        self._handle("ADDED", pod)
                    rv = listed.metadata.resource_version
                w = self._watch = watch.Watch()
                for ev in w.stream(
                    self.core.list_pod_for_all_namespaces,
                    resource_version=rv,
                    timeout_seconds=30,
                    allow_watch_bookmarks=True,
                ):
                    if self._stop.is_set():
                        w.stop()
                        break
                    if ev["type"] == "ERROR":  # e.g. 410 Gone: the version is too old
                        rv = None
                        break
                    obj = ev["object"]
                    if ev["type"] == "BOOKMARK":  # may arrive as a plain dict
                        meta = obj.get("metadata", {}) if isinstance(obj, dict) else None
                        rv = (
                            meta.get("resourceVersion", rv)
                            if meta is not None
                            else (obj.metadata.resource_version)
                        )
                        continue
                    rv = obj.metadata.resource_version
                    self._handle(ev["type"], obj)
            except ApiException as exc:
                rv = None if exc.status == 410 else rv  # 410 Gone: relist
                self._stop.wait(0.5)
            except Exception:
                if self._stop.is_set():
                    return
                self._log_exception("pod watch")
                self._stop.wait(0.5)

    def _handle(self, kind: str, pod) -> None:
        if pod.spec.node_name not in self.nodes:
            return
        uid = pod.metadata.uid
        with self._lock:
            runner = self.runners.get(uid)
            if kind == "DELETED":
                if runner is not None:
                    runner.delete(0)
                return
            if pod.metadata.deletion_timestamp is not None:
                if runner is None:
                    self._finalize(uid, pod.metadata.namespace, pod.metadata.name)
                else:
                    runner.delete(pod.metadata.deletion_grace_period_seconds)
                return
            if runner is None and uid not in self.pods:
                self._start_pod(pod)

    def _start_pod(self, pod) -> None:
        uid, ns, name = pod.metadata.uid, pod.metadata.namespace, pod.metadata.name
        self.pods[uid] = (ns, name)
        c = pod.spec.containers[0]
        if not SIM_IMAGE.search(c.image or ""):
            self._pod_event(
                pod,
                "ImageNotSupported",
                f"the rollcheck node agent runs only the simulator image "
                f"(rollcheck/sim), not {c.image!r}",
                "Warning",
            )
            self._patch_status(
                ns,
                name,
                {
                    "phase": "Pending",
                    "containerStatuses": [
                        {
                            "name": c.name,
                            "ready": False,
                            "restartCount": 0,
                            "image": c.image,
                            "imageID": "",
                            "state": {
                                "waiting": {
                                    "reason": "ImageNotSupported",
                                    "message": "only rollcheck/sim runs on this node agent",
                                }
                            },
                        }
                    ],
                },
            )
            return
        pod_ip, ip = self.net.allocate()
        self.pod_ips[uid] = pod_ip
        port = int((c.ports or [client.V1ContainerPort(container_port=8000)])[0].container_port)
        # The image stands for `rollcheck sim`; the container's args are its options.
        args = [str(a) for a in (c.args or [])]
        command = [
            sys.executable,
            "-m",
            "harness.cli",
            "sim",
            *args,
            "--host",
            ip,
            "--port",
            str(port),
        ]
        env = {e.name: e.value for e in (c.env or []) if e.value is not None}
        version = (pod.metadata.labels or {}).get("version") or c.image.rsplit(":", 1)[-1]
        spec = PodSpec(name, version, pod.spec.node_name, ip, port, command, pod_settings(pod), env)
        runner = PodRunner(spec, self._emit(ns), self.dir, on_change=self._dirty.set)
        named = (pod.metadata.annotations or {}).get(LOG_FILE_ANNOTATION)
        runner.log_file = Path(named) if named else self.dir / f"{name}.log"
        runner.uid = uid
        runner.container = c.name
        runner.image = c.image
        self.runners[uid] = runner
        self.events.emit(
            "pod_created",
            pod=name,
            node=spec.node,
            version=version,
            address=spec.address,
            namespace=ns,
        )
        runner.start()
        self._dirty.set()

    def _emit(self, namespace: str):
        def emit(kind: str, **kw):
            self._dirty.set()
            return self.events.emit(kind, namespace=namespace, **kw)

        return emit

    def _pod_event(self, pod, reason: str, message: str, etype: str = "Normal") -> None:
        ev = client.CoreV1Event(
            metadata=client.V1ObjectMeta(
                generate_name=f"{pod.metadata.name}.", namespace=pod.metadata.namespace
            ),
            involved_object=client.V1ObjectReference(
                kind="Pod",
                name=pod.metadata.name,
                namespace=pod.metadata.namespace,
                uid=pod.metadata.uid,
            ),
            reason=reason,
            message=message,
            type=etype,
            first_timestamp=_now(),
            last_timestamp=_now(),
            count=1,
            source=client.V1EventSource(component="rollcheck-node-agent", host=pod.spec.node_name),
        )
        try:
            self.core.create_namespaced_event(pod.metadata.namespace, ev)
        except ApiException:
            pass

    def _status_of(self, r: PodRunner) -> dict:
        if r.done.is_set():
            state = {
                "terminated": {
                    "exitCode": r.exit_code if r.exit_code is not None else 137,
                    "reason": "Completed" if r.exit_code == 0 else "Error",
                }
            }
        elif r.proc is not None and r.proc.poll() is None:
            state = {"running": {}}  # no startedAt: the status stays equal between syncs
        else:
            state = {
                "waiting": {"reason": "CrashLoopBackOff" if r.restarts else "ContainerCreating"}
            }
        ready = "True" if r.ready else "False"
        return {
            "phase": "Running" if r.proc is not None else "Pending",
            "podIP": self.pod_ips[r.uid],
            "podIPs": [{"ip": self.pod_ips[r.uid]}],
            "hostIP": "127.0.0.1",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "ContainersReady", "status": ready},
                {"type": "Ready", "status": ready},
            ],
            "containerStatuses": [
                {
                    "name": r.container,
                    "image": r.image,
                    "imageID": "",
                    "ready": r.ready,
                    "started": r.started,
                    "restartCount": r.restarts,
                    "state": state,
                }
            ],
        }

    def _sync_status(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait(0.5)
            self._dirty.clear()
            with self._lock:
                runners = list(self.runners.items())
            for uid, r in runners:
                try:
                    ns, name = self.pods[uid]
                    if r.done.is_set():
                        self._finalize(uid, ns, name)
                        continue
                    status = self._status_of(r)
                    if status != self._reported.get(uid) and self._patch_status(ns, name, status):
                        self._reported[uid] = status
                except Exception:  # one pod's trouble must not stop every pod's status
                    self._log_exception("status sync")

    def _log_exception(self, where: str) -> None:
        import traceback

        with open_append(self.dir.parent / "agent.log") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {where}: {traceback.format_exc()}\n")

    def _patch_status(self, ns: str, name: str, status: dict) -> bool:
        try:
            self.core.patch_namespaced_pod_status(name, ns, {"status": status})
            return True
        except ApiException as exc:
            if exc.status != 404:
                self._log_exception(f"status of {ns}/{name}")
            return False

    def _finalize(self, uid: str, ns: str, name: str) -> None:
        """The container is gone: complete the deletion, as the kubelet does."""
        try:
            self.core.delete_namespaced_pod(
                name,
                ns,
                body=client.V1DeleteOptions(
                    grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)
                ),
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                return
        with self._lock:
            if uid in self.runners:
                r = self.runners.pop(uid)
                self.events.emit(
                    "pod_removed", pod=name, node=r.spec.node, version=r.spec.version, namespace=ns
                )
            self._reported.pop(uid, None)
            if uid in self.pod_ips:
                self.net.release(self.pod_ips.pop(uid))

    # --- stop ----------------------------------------------------------------------
    def pod_address(self, namespace: str, name: str) -> str | None:
        with self._lock:
            for uid, (ns, n) in self.pods.items():
                if (ns, n) == (namespace, name) and uid in self.runners:
                    return self.runners[uid].spec.address
        return None

    def log_file(self, namespace: str, name: str) -> Path | None:
        """The file behind a container's log on this node (kubeletlogs.py)."""
        r = self.runner(namespace, name)
        return getattr(r, "log_file", None) if r is not None else None

    def runner(self, namespace: str, name: str) -> PodRunner | None:
        with self._lock:
            for uid, (ns, n) in self.pods.items():
                if (ns, n) == (namespace, name) and uid in self.runners:
                    return self.runners[uid]
        return None

    def stop(self) -> None:
        self._stop.set()
        self._dirty.set()
        if self.logs is not None:
            self.logs.stop()
        _close_watch(getattr(self, "_watch", None))
        with self._lock:
            runners = list(self.runners.values())
        for r in runners:
            r.delete(0)
        for r in runners:
            r.done.wait(10)
        for t in self._threads:
            t.join(2)


def _close_watch(w) -> None:
    """End a watch stream now (its thread would otherwise block until the server's timeout);
    Watch.stop() shuts the socket down, which unblocks the read."""
    if w is not None:
        w.stop()
