"""The Kubernetes target's actions (rollout, evict, drain, scale, kill) and pod access."""

from __future__ import annotations

import os
import signal
import ssl
import time

import httpx
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from harness.client import http_get
from harness.cluster.kube.common import KEDA_PAUSE, KEDA_PAUSE_SCALE_IN, _int_or_str, _message, _ts
from harness.cluster.kube.scaling import removal_reason
from harness.cluster.metrics import parse_metrics
from harness.cluster.target import (
    CannotRun,
    EvictionRefused,
    PodView,
    TargetError,
    evict_retrying,
    strategy_changes,
)
from harness.sim.settings import flag_name

# an engine's /metrics or /health through the API server's pods proxy: a pod whose address
# went away (drained, deleted) left the proxy dialling it for 24-30 s, and the engines'
# witness read the drained pod once more after the load stopped, so every drain on a
# cluster judged half a minute late (seen in its phase lines: "stopping the load" at
# +9.7 s, "judging" at +37.7 s); a live engine answers in milliseconds
POD_READ_TIMEOUT_S = 5.0


class Actions:
    """What a scenario does to the Deployment and its pods, and how the engines are read."""

    # --- actions -------------------------------------------------------------------
    def check_own_pod(self, name: str) -> PodView:
        for p in self.pods():
            if p.name == name:
                return p
        raise TargetError(f"pod {name!r} is not a pod of {self.ns}/{self.k.deployment}")

    def rollout(self, version, engine=None, max_surge=None, max_unavailable=None, min_ready_s=None):
        changes = strategy_changes(max_surge, max_unavailable, min_ready_s)
        self.action("rollout", to_version=version, engine=engine or {}, **changes)
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
        self._rolling = self.scaling.rolling = True
        self._events.emit("rollout_started", version=version)
        self._patch_deployment(body)

    def rollout_done(self) -> bool:
        dep = self.apps.read_namespaced_deployment(self.k.deployment, self.ns)
        s, want = dep.status, dep.spec.replicas or 0
        done = (
            (s.observed_generation or 0) >= dep.metadata.generation
            and (s.updated_replicas or 0) == want
            and (s.available_replicas or 0) == want
            and (s.replicas or 0) == want
        )
        if done and self._rolling:
            self._rolling = self.scaling.rolling = False
            self._events.emit("rollout_complete")
        return done and not self._rolling

    def evict_pod(self, name: str, retry_deadline_s: float = 0.0) -> None:
        self.check_own_pod(name)
        self.action("evict", pod=name)
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
        self.check_node_drain(node)
        victims = [p.name for p in self.pods() if p.node == node and not p.terminating]
        self.action("drain_node", node=node, pods=victims)
        self._cordoned.append(node)
        self._mark_restore_pending()  # the note names the node before it is cordoned
        self.core.patch_node(node, {"spec": {"unschedulable": True}})
        self._events.emit("cordoned", node=node)
        for name in victims:  # only our Deployment's pods: the rest of the node is not ours
            self.evict_pod(name, retry_deadline_s)
        return victims

    def uncordon(self, node: str) -> None:
        if node in self._cordoned:
            self.core.patch_node(node, {"spec": {"unschedulable": False}})
            self._cordoned.remove(node)

    def scale_down(self, pod: str) -> None:
        """One replica fewer, and the ReplicaSet removes `pod`: the lowest
        controller.kubernetes.io/pod-deletion-cost goes first."""
        self.check_own_pod(pod)
        dep = self.apps.read_namespaced_deployment(self.k.deployment, self.ns)
        replicas = (dep.spec.replicas or 0) - 1
        self.action("scale_down", pod=pod, replicas=replicas, deletion_cost=-1000)
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
        self._mark_restore_pending()
        self.scaling.hold(replicas)  # until handed back: a scaler changing it fights us
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

    def hold_count(self, replicas: int) -> None:
        """With a ScaledObject or HPA on the Deployment, the count is set and held (KEDA
        paused at it; an HPA that changes it anyway is named as a fight), so nothing but
        the scenario's own act moves it; the restore hands it back."""
        if self.workload_scalers():
            self.scale(replicas)

    def workload_scalers(self) -> list[str]:
        return [f"ScaledObject/{n}" for n in self._scaled_objects()] + [
            f"HorizontalPodAutoscaler/{n}" for n in self._hpas()
        ]

    def desired_replicas(self) -> int | None:
        return self.apps.read_namespaced_deployment(self.k.deployment, self.ns).spec.replicas

    def why_removed(self, name: str) -> str:
        """The ReplicaSet's reasons, in its own order (controller.ActivePodsWithRanks):
        not ready before ready, the lowest pod-deletion-cost, the most pods on one node,
        the shortest time ready, the most restarts, the newest."""
        with self._lock:
            pods = [p for p in self._pods.values() if p.metadata.name == name or (
                p.metadata.deletion_timestamp is None)]  # fmt: skip
        return removal_reason(name, [self.api.sanitize_for_serialization(p) for p in pods])

    def _keda_annotate(self, name: str, value: str | None) -> None:
        """Pause the ScaledObject at `value` replicas, or (None) un-pause it entirely."""
        self._keda_patch(name, {KEDA_PAUSE: value, KEDA_PAUSE_SCALE_IN: None})

    def _keda_patch(self, name: str, annotations: dict) -> None:
        self.custom.patch_namespaced_custom_object(
            "keda.sh",
            "v1alpha1",
            self.ns,
            "scaledobjects",
            name,
            {"metadata": {"annotations": annotations}},
        )

    def kill_pod(self, name: str, sig: int = signal.SIGKILL) -> None:
        self.check_own_pod(name)
        self.action("kill", pod=name, signal=signal.Signals(sig).name)
        if sig != signal.SIGKILL:
            raise TargetError(
                f"only SIGKILL is supported on the kube target (force delete); "
                f"{signal.Signals(sig).name} would need exec into the container"
            )
        self._delete(name, 0)

    def delete_pod(self, name: str, grace_s: float | None = None) -> None:
        self.check_own_pod(name)
        self.action("delete", pod=name, grace_s=grace_s)
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
        """kube.scaler=harness: scale to the autoscaler's minimum now. cluster: hand the
        replica count back to the cluster's own scalers (the KEDA ScaledObjects the
        harness paused are un-paused) and let them act; which scalers were found is on
        the timeline. With none, the scenario cannot test a scaler: CannotRun, before
        anything changes."""
        if self.k.scaler == "harness":
            self.action("autoscaler", policy=policy, mode="harness")
            self.scale(self.cfg.autoscaler.min_replicas)
            return
        blocker = self.autoscaler_blocker()
        if blocker:
            raise CannotRun(blocker)
        self.hand_back()

    def hand_back(self, as_act: bool = True, hold_scale_in: bool = False) -> None:
        """The replica count goes back to the Deployment's own scalers (KEDA un-paused);
        from now on what they decide is theirs, on the timeline. as_act: the scenario's
        act (the disruption); else a preparation (scale_up's act is the load step).
        hold_scale_in: KEDA reads its triggers and may scale out but not in until
        release_scale_in(), so that it first reads the load it is handed (a ScaledObject
        that was never active scales to zero at its first inactive reading)."""
        keda, hpas = self._scaled_objects(), self._hpas()
        kind = "autoscaler" if as_act else "scaler_watch"
        self.action(kind, mode="cluster", keda=keda, hpa=hpas)
        self.scaling.release()
        for so in keda:
            if hold_scale_in:
                self._keda_patch(so, {KEDA_PAUSE: None, KEDA_PAUSE_SCALE_IN: "true"})
            else:
                self._keda_annotate(so, None)  # KEDA owns the replica count again
                if so in self._keda_paused:
                    self._keda_paused.remove(so)
        self._events.emit("autoscaler_handed_back", keda=keda, hpa=hpas)

    def release_scale_in(self) -> None:
        """KEDA may scale in again: the hand-over that hold_scale_in began is complete."""
        for so in self._scaled_objects():
            if so in self._keda_paused:
                self._keda_annotate(so, None)
                self._keda_paused.remove(so)

    def scaler_active_since(self, t: float) -> bool | None:
        """Whether every KEDA ScaledObject on the Deployment has read its triggers as
        active since t (its status.lastActiveTime, to the second); None without one."""
        objects = self._scaled_objects(full=True)
        if not objects:
            return None
        times = [(o.get("status") or {}).get("lastActiveTime") for o in objects]
        return all(v is not None and _ts(v) >= int(t) for v in times)

    def _patch_deployment(self, body) -> None:
        try:
            self.apps.patch_namespaced_deployment(self.k.deployment, self.ns, body)
        except ApiException as exc:
            raise self._error(
                exc, "patch", "deployments", f"deployment {self.k.deployment}"
            ) from None

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
                    r = http_get(url, timeout=2.0, headers=self.auth_headers())
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
                    f"{name}:{self.port}", self.ns, path, _request_timeout=POD_READ_TIMEOUT_S
                )
            except (urllib3.exceptions.HTTPError, OSError) as exc:  # (the bound above)
                tried.append(f"API server pods proxy: {type(exc).__name__}")
                continue
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
        """Where golden prompts reach one pod: its IP when its engine answers from here (in
        a pod of the cluster, or on kube-local's bridges), else the API server's pods proxy
        with the kubeconfig's credentials (RBAC: pods/proxy get). The direct way comes
        first: on kube-local the pods proxy cut 2 of about 70 answers mid-stream in one
        run ("use of closed network connection" on its side; docs/facts.md), and an
        answer cut by the way there is not the candidate's."""
        direct = self._direct_endpoint(name) if self.k.pod_access != "proxy" else None
        if direct is not None:
            return direct
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

    def _direct_endpoint(self, name: str) -> tuple[str, dict] | None:
        with self._lock:
            pod = next((p for p in self._pods.values() if p.metadata.name == name), None)
        ip = pod.status.pod_ip if pod is not None and pod.status else None
        if not ip:
            return None
        url = f"http://{ip}:{self.port}"
        headers = self.auth_headers()
        try:
            r = http_get(url + "/health", timeout=1.0, headers=headers)
        except httpx.HTTPError:
            return None  # unroutable from here, as pod IPs usually are outside a cluster
        if r.status_code == 404:  # not the engine
            return None
        return url, ({"headers": headers} if headers else {})

    def pod_health(self, name: str) -> int | None:
        status, _ = self._pod_get(name, "health")
        return status if status and status < 600 and status != 404 else None
