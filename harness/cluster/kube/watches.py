"""The Kubernetes target's observation: watches resumed after disconnects from the last
resourceVersion (410 Gone -> relist), and the gateway pods' logs."""

from __future__ import annotations

import atexit
import re
import socket
import threading
from pathlib import Path

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from harness.cluster.kube.common import (
    Cluster,
    Shared,
    _ready,
    _ts,
    engine_of,
    engine_status,
    is_candidate,
    prestop_s,
)
from harness.cluster.kube.preemption import preempted
from harness.cluster.kube.scaling import ScalerObserver
from harness.cluster.target import PodView, TargetError
from harness.files import open_append


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


# what the gateways name their proxy's container: Envoy Gateway and kgateway `envoy`,
# ingress-nginx `controller`, Istio's gateways `istio-proxy`
GATEWAY_CONTAINERS = ("envoy", "controller", "istio-proxy")


def pod_view(pod, port: int, engine: str | None) -> PodView:
    return PodView(
        name=pod.metadata.name,
        version=_version(pod, engine),
        node=pod.spec.node_name,
        address=f"{pod.status.pod_ip}:{port}" if pod.status.pod_ip else None,
        phase=pod.status.phase or "Pending",
        ready=_ready(pod),
        terminating=pod.metadata.deletion_timestamp is not None,
        restarts=_restarts(pod, engine),
        created_at=_ts(pod.metadata.creation_timestamp),
        image=engine_of(pod.spec, engine).image,
    )


def _version(pod, engine: str | None) -> str:
    labels = pod.metadata.labels or {}
    return labels.get("version") or engine_of(pod.spec, engine).image.rsplit(":", 1)[-1]


def _termination(pod, engine: str | None) -> dict | None:
    """The engine container's last exit as its status shows it (its state terminated, or
    its last state once the kubelet restarted it): exit code, reason (OOMKilled, Error),
    finish time and restart count; the same exit reads the same either way, so that the
    watch reports it once. None before it ever exited."""
    c = engine_status(pod, engine)
    if c is None:
        return None
    term = (c.state.terminated if c.state else None) or (
        c.last_state.terminated if c.last_state else None
    )
    if term is None:
        return None
    return {
        "code": term.exit_code,
        "reason": term.reason,
        "finished": term.finished_at.isoformat() if term.finished_at else None,
        "container_id": (term.container_id or "").split("://", 1)[-1][:12],
    }


# the kubelet's CrashLoopBackOff message: "back-off 20s restarting failed container=..."
BACK_OFF = re.compile(r"back-off (?:(\d+)m)?(\d+)s")


def _back_off(pod, engine: str | None) -> dict | None:
    """The engine container's wait before its next restart as its status shows it (state
    waiting, reason CrashLoopBackOff): the back-off in seconds (None if the message does
    not say) and the restart count; None while it is not waiting so."""
    c = engine_status(pod, engine)
    waiting = c.state.waiting if c is not None and c.state else None
    if waiting is None or waiting.reason != "CrashLoopBackOff":
        return None
    m = BACK_OFF.search(waiting.message or "")
    delay = int(m.group(1) or 0) * 60 + int(m.group(2)) if m else None
    return {"delay_s": delay, "restarts": c.restart_count}


def _restarts(pod, engine: str | None) -> int:
    """The engine container's restarts (a sidecar's restart is not the engine's)."""
    statuses = pod.status.container_statuses or []
    mine = [c for c in statuses if c.name == engine] or statuses
    return sum(c.restart_count for c in mine)


class Watches:
    """Watches on pods, ReplicaSets, EndpointSlices, events, the Deployment and its HPAs,
    turned into the same timestamped events as the local target (the pods they see go
    to the shared state); and the gateway pods' logs, followed."""

    def __init__(self, c: Cluster, shared: Shared, scaling: ScalerObserver):
        self.c, self.s, self.scaling = c, shared, scaling
        self.watches: list[_Watch] = []
        self._capacity = None
        self._slices: dict[str, set] = {}
        self.gw_files: tuple[Path, Path] | None = None
        # the log follows (the gateway pods', the engine pods'): their responses and
        # threads, ended together by stop_logs()
        self._log_lock = threading.Lock()
        self._streams: list = []
        self._followers: list[threading.Thread] = []
        self._engine_dir: Path | None = None  # follow_engine_logs(): where they go
        self._engines_followed: set[str] = set()  # pod uids

    def start(self, selector: str) -> None:
        """Watch the workload's pods (by `selector`) and what goes with them."""
        c = self.c
        # Watches left running at interpreter exit would log from daemon threads while
        # Python shuts down, which can abort the process: stop them first.
        atexit.register(self.stop)
        atexit.register(self.stop_logs)  # the log follows' threads, the same
        by_label = {"label_selector": selector}
        for name, lister, on_event, kw in (
            ("pods", c.core.list_namespaced_pod, self._on_pod, by_label),
            ("replicasets", c.apps.list_namespaced_replica_set, self._on_rs, by_label),
            ("endpointslices", c.discovery.list_namespaced_endpoint_slice, self._on_slice, {}),
            ("events", c.core.list_namespaced_event, self._on_k8s_event, {}),
            (
                "deployment",
                c.apps.list_namespaced_deployment,
                self._as_dict(self.scaling.on_deployment),
                {"field_selector": f"metadata.name={c.deployment}"},
            ),
            *self._hpa_watch(),
        ):
            w = _Watch(name, lister, on_event, self._relister(name, on_event), c.ns, **kw)
            self.watches.append(w)
            w.start()

    def watch_candidate(self, selector: str) -> None:
        """Watch a weighted canary's candidate pods too (by their own label), into the same
        pods and events as the workload's."""
        if any(w.name == "watch-candidate-pods" for w in self.watches):
            return
        on_event = self._on_pod
        w = _Watch(
            "candidate-pods",
            self.c.core.list_namespaced_pod,
            on_event,
            self._relister("candidate-pods", on_event),
            self.c.ns,
            label_selector=selector,
        )
        self.watches.append(w)
        w.start()

    def _as_dict(self, on_event):
        """A watch callback fed the object as the API's JSON (the observer's input)."""
        return lambda kind, obj: on_event(kind, self.c.api.sanitize_for_serialization(obj))

    def _hpa_watch(self) -> list[tuple]:
        """The HPAs' watch, where the harness may list them (RBAC autoscaling list/watch)."""
        hpas = client.AutoscalingV2Api(self.c.api)
        try:
            hpas.list_namespaced_horizontal_pod_autoscaler(self.c.ns, limit=1)
        except ApiException:
            return []
        on_hpa = self._as_dict(self.scaling.on_hpa)
        return [("hpas", hpas.list_namespaced_horizontal_pod_autoscaler, on_hpa, {})]

    def views(self) -> list[PodView]:
        with self.s.lock:
            return [pod_view(p, self.s.port, self.s.engine) for p in self.s.pods.values()]

    # --- watches -> events -----------------------------------------------------
    def _relister(self, name: str, on_event):
        def relist(items) -> None:
            if name in ("pods", "candidate-pods"):
                # each pod watch relists its own pods: the candidate's, or all the others
                mine = name == "candidate-pods"
                seen = {p.metadata.uid for p in items}
                with self.s.lock:
                    gone = [
                        p
                        for uid, p in self.s.pods.items()
                        if uid not in seen and is_candidate(p) == mine
                    ]
                for p in gone:
                    self._on_pod("DELETED", p)  # missed while disconnected
            for obj in items:
                on_event("ADDED", obj)

        return relist

    def _on_pod(self, kind: str, pod) -> None:
        uid = pod.metadata.uid
        name, node = pod.metadata.name, pod.spec.node_name
        version = _version(pod, self.s.engine)
        with self.s.lock:
            old = self.s.pods.get(uid)
            if kind == "DELETED":
                self.s.pods.pop(uid, None)
                if old is not None:
                    self.c.emit("pod_removed", pod=name, node=node, version=version)
                self._capacity_event()
                return
            self.s.pods[uid] = pod
        self._maybe_follow_engine(pod)
        emit = self.c.emit
        if (old is None or not old.status.pod_ip) and pod.status.pod_ip:
            emit(
                "pod_created",
                pod=name,
                node=node,
                version=version,
                t=_ts(pod.metadata.creation_timestamp),
                address=f"{pod.status.pod_ip}:{self.s.port}",
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
            prestop = prestop_s(engine_of(pod.spec, self.s.engine))
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
        hit = preempted(pod)
        if hit is not None and (old is None or preempted(old) is None):
            emit("preempted", pod=name, node=node, version=version, t=hit[0], message=hit[1][:300])
        ended = _termination(pod, self.s.engine)
        if ended is not None and old is not None and _termination(old, self.s.engine) != ended:
            restarts = _restarts(pod, self.s.engine)
            emit("exited", pod=name, node=node, version=version, restarts=restarts, **ended)
        waits = _back_off(pod, self.s.engine)
        if waits is not None and (old is None or _back_off(old, self.s.engine) != waits):
            emit("back_off", pod=name, node=node, version=version, **waits)
        self._capacity_event()

    def _capacity_event(self) -> None:
        with self.s.lock:
            pods = list(self.s.pods.values())
        live = [p for p in pods if p.metadata.deletion_timestamp is None]
        cap = (sum(1 for p in live if _ready(p)), len(pods))
        if cap != self._capacity:
            self._capacity = cap
            self.c.emit("capacity", ready=cap[0], available=cap[0], pods=cap[1])

    def _on_rs(self, kind: str, rs) -> None:
        if kind == "MODIFIED":
            self.c.emit(
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
            self.c.emit("endpoint_added", pod=pod, address=a, service=svc)
        for a, pod in sorted(before - now, key=str):
            self.c.emit("endpoint_removed", pod=pod, address=a, service=svc)
        prev[s.metadata.name] = now

    def _on_k8s_event(self, kind: str, ev) -> None:
        if kind != "ADDED":
            return
        obj = ev.involved_object
        self.c.emit(
            "k8s_event",
            pod=obj.name if obj.kind == "Pod" else None,
            t=_ts(ev.last_timestamp or ev.event_time or ev.metadata.creation_timestamp),
            reason=ev.reason,
            message=(ev.message or "")[:300],
            object=obj.kind,
            name=obj.name,
        )

    def stop(self) -> None:
        for w in self.watches:
            w.stop()
        for w in self.watches:
            w.join(5)

    def interrupt(self) -> None:
        """Break every watch connection once (tests the resume path)."""
        for w in self.watches:
            w.interrupt()

    def follow_gateway_logs(self) -> None:
        """Follow the ingress controller pods' logs into gateway/access.log and error.log
        (ingress-nginx writes both to its container output) until close(). A selector that
        finds no pod, or a missing permission, stops the run here in one line."""
        ns, selector = self.c.k.gateway_pods_namespace, self.c.k.gateway_pods_selector
        folder = self.c.run_dir / "gateway"
        folder.mkdir(parents=True, exist_ok=True)
        self.gw_files = (folder / "access.log", folder / "error.log")
        if self.c.allowed("get", "pods", sub="log", namespace=ns) is False:
            raise TargetError(
                f"RBAC: not allowed to get pods/log in namespace {ns} (the gateway's logs); "
                "install the chart with rbac.gatewayLogs.namespace and .selector (its Role "
                "<release>-gateway-logs), or unset kube.gateway_pods_selector"
            )
        try:
            pods = self.c.core.list_namespaced_pod(ns, label_selector=selector).items
        except ApiException as exc:
            raise self.c.error(exc, "list", "pods", f"gateway pods in {ns}") from None
        pods = [p for p in pods if p.status.phase == "Running"]
        if not pods:
            raise TargetError(
                f"kube.gateway_pods_selector {selector!r} matches no running pod in namespace "
                f"{ns} (kube.gateway_pods_namespace); check both, e.g. "
                "app.kubernetes.io/name=ingress-nginx in ingress-nginx"
            )
        for pod in pods:
            container = self._access_log_container(pod)
            self.c.emit(
                "gateway_log_followed",
                gateway_pod=pod.metadata.name,
                container=container or pod.spec.containers[0].name,
            )
            try:
                resp = self.c.core.read_namespaced_pod_log(
                    pod.metadata.name,
                    ns,
                    container=container,
                    follow=True,
                    since_seconds=1,
                    _preload_content=False,
                )
            except ApiException as exc:
                raise self.c.error(exc, "get", "pods/log", f"{ns}/{pod.metadata.name}") from None
            self._start_follower(
                f"gateway-log-{pod.metadata.name}", self._follow_log, resp, keep=resp
            )

    def _access_log_container(self, pod) -> str | None:
        """The gateway pod's container whose log holds the access lines (None: its only
        one). Reading a pod of several containers without naming one is an HTTP 400:
        Envoy Gateway's pods run `envoy` and `shutdown-manager`. kube.gateway_pods_container
        names it; else the container whose recent log has an access line in a known
        format; else one named as the gateways name theirs."""
        from harness.gateway_logs import is_access_line

        names = [c.name for c in pod.spec.containers]
        where = f"gateway pod {self.c.k.gateway_pods_namespace}/{pod.metadata.name}"
        wanted = self.c.k.gateway_pods_container
        if wanted:
            if wanted not in names:
                raise TargetError(
                    f"kube.gateway_pods_container {wanted!r} is not a container of {where} "
                    f"(it has {', '.join(names)}); set it to the one that logs access lines"
                )
            return wanted
        if len(names) == 1:
            return None
        for name in names:
            try:
                text = self.c.core.read_namespaced_pod_log(
                    pod.metadata.name, pod.metadata.namespace, container=name, tail_lines=50
                )
            except ApiException:
                continue
            if any(is_access_line(line) for line in (text or "").splitlines() if line.strip()):
                return name
        known = [n for n in names if n in GATEWAY_CONTAINERS]
        if known:
            return known[0]
        raise TargetError(
            f"{where} has containers {', '.join(names)} and no access line in their recent "
            "logs to tell which is the gateway's; set kube.gateway_pods_container=NAME"
        )

    def _follow_log(self, resp) -> None:
        from harness.gateway_logs import ERROR_LINE

        access, error = (open_append(p) for p in self.gw_files)
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

    def _start_follower(self, name: str, target, *args, keep=None) -> None:
        follower = threading.Thread(target=target, args=args, daemon=True, name=name)
        with self._log_lock:
            if keep is not None:
                self._streams.append(keep)
            self._followers.append(follower)
        follower.start()

    def follow_engine_logs(self) -> None:
        """Follow every engine pod's log (its engine container, from its start) into
        engines/<pod>.log, for the engines' own request lines: each pod as the watch
        first sees it running, until close()."""
        self._engine_dir = self.c.run_dir / "engines"
        self._engine_dir.mkdir(parents=True, exist_ok=True)
        with self.s.lock:
            pods = list(self.s.pods.values())
        for pod in pods:
            self._maybe_follow_engine(pod)

    def engine_log_files(self) -> dict[str, Path]:
        if self._engine_dir is None:
            return {}
        return {p.stem: p for p in sorted(self._engine_dir.glob("*.log"))}

    def _maybe_follow_engine(self, pod) -> None:
        if self._engine_dir is None or pod.status.phase != "Running":
            return
        with self._log_lock:
            if pod.metadata.uid in self._engines_followed:
                return
            self._engines_followed.add(pod.metadata.uid)
        name = pod.metadata.name
        self._start_follower(f"engine-log-{name}", self._follow_engine, name)

    def _follow_engine(self, name: str) -> None:
        """One engine container's log, appended to its file as it comes (a restarted
        container ends the follow: what it logged is kept)."""
        try:
            resp = self.c.core.read_namespaced_pod_log(
                name, self.c.ns, container=self.s.engine, follow=True, _preload_content=False
            )
        except ApiException as exc:
            self.c.emit("engine_log_unreadable", pod=name, status=exc.status)
            return
        with self._log_lock:
            self._streams.append(resp)
        with open_append(self._engine_dir / f"{name}.log", binary=True) as out:
            try:
                for chunk in resp.stream(4096):
                    out.write(chunk)
                    out.flush()
            except Exception:
                pass  # closed by close(), or the pod went away: its lines so far are kept

    def stop_logs(self) -> None:
        """End the follows. Closing a response another thread is reading blocks on that
        read (a follow that never ends): shut the socket down first, so the read returns,
        let the followers write what they have, then close."""
        with self._log_lock:
            streams, followers = list(self._streams), list(self._followers)
            self._streams, self._followers = [], []
        for resp in streams:
            sock = getattr(getattr(resp, "connection", None), "sock", None)
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        for follower in followers:
            follower.join(5)
        for resp in streams:
            try:
                resp.release_conn()
                resp.close()
            except Exception:
                pass
