"""The Kubernetes target's actions: rollout, evict, drain, scale, kill, and the hand-over
of the replica count to the workload's own scalers."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from kubernetes import client
from kubernetes.client.rest import ApiException

from harness.cluster.kube.common import (
    KEDA_PAUSE,
    KEDA_PAUSE_SCALE_IN,
    Cluster,
    Shared,
    _int_or_str,
    _message,
    _ts,
    engine_of,
    engine_status,
    run_user_command,
)
from harness.cluster.kube.restore import Restore
from harness.cluster.kube.scaling import ScalerObserver, removal_reason
from harness.cluster.target import (
    EvictionRefused,
    PodView,
    TargetError,
    canary_rollout,
    evict_retrying,
    strategy_changes,
)
from harness.sim.settings import flag_name
from harness.waits import wait_until

# a Deployment's progressDeadlineSeconds when unset; the API refuses a minReadySeconds
# that is not below it (HTTP 422, measured on kube-local)
DEFAULT_PROGRESS_DEADLINE_S = 600
CANARY_POD_S = 60.0  # the longest the controller may take to make the candidate's pod
KILL_COMMAND_S = 30.0  # the longest kube.kill_command may run


class Actions:
    """What a scenario does to the Deployment and its pods. `pods`: the target's view of
    them; each change is recorded for the restore (`restore.mark_pending`) before it is
    made, and the replica count held against the workload's scalers (`scaling`)."""

    def __init__(
        self,
        c: Cluster,
        shared: Shared,
        restore: Restore,
        scaling: ScalerObserver,
        pods: Callable[[], list[PodView]],
    ):
        self.c, self.s, self.restore, self.scaling, self.pods = c, shared, restore, scaling, pods
        self.rolling = False  # a rollout of ours is in progress
        self.canary_baseline: dict = {}  # start_canary: the template and minReadySeconds before

    def check_own_pod(self, name: str) -> PodView:
        for p in self.pods():
            if p.name == name:
                return p
        raise TargetError(f"pod {name!r} is not a pod of {self.c.ns}/{self.c.deployment}")

    def rollout(self, version, engine=None, max_surge=None, max_unavailable=None, min_ready_s=None):
        changes = strategy_changes(max_surge, max_unavailable, min_ready_s)
        self.c.action("rollout", to_version=version, engine=engine or {}, **changes)
        self.start_rollout(version, engine, max_surge, max_unavailable, min_ready_s)

    def start_rollout(
        self, version, engine=None, max_surge=None, max_unavailable=None, min_ready_s=None
    ) -> None:
        """The rollout's patch, under an act its caller has recorded (pd_rollout records
        one act for both roles)."""
        self.restore.mark_pending()
        dep = self.c.apps.read_namespaced_deployment(self.c.deployment, self.c.ns)
        body = self.rollout_body(dep, version, engine, max_surge, max_unavailable)
        if min_ready_s is not None:
            body["spec"]["minReadySeconds"] = int(min_ready_s)
        self.rolling = self.scaling.rolling = True
        self.c.emit("rollout_started", version=version)
        self.c.patch_deployment(body)

    def rollout_body(self, dep, version, engine, max_surge, max_unavailable) -> dict:
        """The patch that rolls the Deployment to `version` (its engine container's image
        when kube.image is set, its args for `engine`, the version label, a restart
        annotation) with the strategy's changes."""
        c = engine_of(dep.spec.template.spec, self.s.engine)
        container = {"name": c.name}
        if self.c.cfg.kube.image:
            container["image"] = self.c.cfg.kube.image.replace("{version}", version)
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
        return body

    def start_canary(self, version: str, engine: dict | None = None) -> None:
        """One candidate pod beside the baseline, and the rollout held there: the template
        change with surge 1 and nothing unavailable, and a minReadySeconds just under the
        progress deadline (a new pod is not available for that long, so the controller
        takes no next step), in one patch; then the Deployment is paused once the
        candidate ReplicaSet has its pod (a pause in the same patch would stop the
        controller before it made one). Pausing after the pod is Ready alone races the
        controller (docs/facts.md)."""
        act = canary_rollout(version, engine)
        self.c.action("rollout", **act)
        self.restore.mark_pending()
        dep = self.c.apps.read_namespaced_deployment(self.c.deployment, self.c.ns)
        self.canary_baseline = {
            "template": self.c.api.sanitize_for_serialization(dep.spec.template),
            "minReadySeconds": dep.spec.min_ready_seconds or 0,
        }
        body = self.rollout_body(dep, version, engine, act["max_surge"], act["max_unavailable"])
        # the candidate is not "available" for as long as the API allows, so the controller
        # takes no step past it before the pause lands (seconds after its pod is made)
        deadline = dep.spec.progress_deadline_seconds or DEFAULT_PROGRESS_DEADLINE_S
        body["spec"]["minReadySeconds"] = max(dep.spec.min_ready_seconds or 0, deadline - 1)
        self.rolling = self.scaling.rolling = True
        self.c.emit("rollout_started", version=version, canary=True)
        self.c.patch_deployment(body)
        wait_until(
            lambda: any(p.version == version for p in self.pods()),
            CANARY_POD_S,
            f"the candidate ReplicaSet's pod of version {version}",
            error=lambda message: TargetError(f"canary: {message}"),
        )
        self.c.patch_deployment({"spec": {"paused": True}})
        self.c.emit("canary_held", version=version, pods=1)

    def promote_canary(self) -> None:
        """The held rollout goes on to every replica, at the Deployment's own pace."""
        if not self.canary_baseline:
            raise TargetError("promote_canary: no canary was started")
        self.c.action("canary_promote")
        self.c.patch_deployment(
            {"spec": {"paused": False, "minReadySeconds": self.canary_baseline["minReadySeconds"]}}
        )

    def rollback_canary(self) -> None:
        """The baseline's template back (as `kubectl rollout undo` would, which refuses a
        paused Deployment), resumed, its minReadySeconds as it was: the candidate
        ReplicaSet is scaled away and nothing else is touched."""
        if not self.canary_baseline:
            raise TargetError("rollback_canary: no canary was started")
        self.c.action("canary_rollback")
        base = self.canary_baseline
        self.c.patch_deployment(  # a JSON patch: the template replaced whole
            [
                {"op": "replace", "path": "/spec/template", "value": base["template"]},
                {"op": "add", "path": "/spec/paused", "value": False},
                {"op": "add", "path": "/spec/minReadySeconds", "value": base["minReadySeconds"]},
            ]
        )
        self.rolling = self.scaling.rolling = True

    def rollout_done(self) -> bool:
        dep = self.c.apps.read_namespaced_deployment(self.c.deployment, self.c.ns)
        s, want = dep.status, dep.spec.replicas or 0
        done = (
            (s.observed_generation or 0) >= dep.metadata.generation
            and (s.updated_replicas or 0) == want
            and (s.available_replicas or 0) == want
            and (s.replicas or 0) == want
        )
        if done and self.rolling:
            self.rolling = self.scaling.rolling = False
            self.c.emit("rollout_complete")
        return done and not self.rolling

    def evict_pod(self, name: str, retry_deadline_s: float = 0.0) -> None:
        self.check_own_pod(name)
        self.c.action("evict", pod=name)
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=self.c.ns))

        def attempt() -> None:
            try:
                self.c.core.create_namespaced_pod_eviction(name, self.c.ns, body)
            except ApiException as exc:
                if exc.status != 429:
                    raise self.c.error(exc, "create", "pods/eviction", f"pod {name}") from None
                self.c.emit("eviction_refused", pod=name, message=_message(exc))
                raise EvictionRefused(f"evicting {name}: {_message(exc)}") from None
            self.c.emit("evicted", pod=name)

        evict_retrying(attempt, retry_deadline_s, interval_s=1.0)

    def drain_node(self, node: str, retry_deadline_s: float = 30.0) -> list[str]:
        """(The target checks first that a node drain is allowed.)"""
        victims = [p.name for p in self.pods() if p.node == node and not p.terminating]
        self.c.action("drain_node", node=node, pods=victims)
        self.s.cordoned.append(node)
        self.restore.mark_pending()  # the note names the node before it is cordoned
        self.c.core.patch_node(node, {"spec": {"unschedulable": True}})
        self.c.emit("cordoned", node=node)
        for name in victims:  # only our Deployment's pods: the rest of the node is not ours
            self.evict_pod(name, retry_deadline_s)
        return victims

    def uncordon(self, node: str) -> None:
        if node in self.s.cordoned:
            self.c.core.patch_node(node, {"spec": {"unschedulable": False}})
            self.s.cordoned.remove(node)

    def scale_down(self, pod: str) -> None:
        """One replica fewer, and the ReplicaSet removes `pod`: the lowest
        controller.kubernetes.io/pod-deletion-cost goes first."""
        self.check_own_pod(pod)
        dep = self.c.apps.read_namespaced_deployment(self.c.deployment, self.c.ns)
        replicas = (dep.spec.replicas or 0) - 1
        self.c.action("scale_down", pod=pod, replicas=replicas, deletion_cost=-1000)
        body = {
            "metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "-1000"}}
        }
        try:
            self.c.core.patch_namespaced_pod(pod, self.c.ns, body)
        except ApiException as exc:
            raise self.c.error(exc, "patch", "pods", pod) from None
        self.scale(replicas)

    def scale(self, replicas: int) -> None:
        self.c.action("scale", replicas=replicas)
        hpas = self.record_hpas()
        self.restore.mark_pending()
        self.scaling.hold(replicas)  # until handed back: a scaler changing it fights us
        for name in hpas:
            self.hold_hpa(name, replicas)
        for so in self.c.scaled_objects():
            # KEDA owns the replica count: pause it at the wanted count instead of fighting it.
            self.c.keda_pause(so, str(replicas))
            if so not in self.s.keda_paused:
                self.s.keda_paused.append(so)
        try:
            self.c.apps.patch_namespaced_deployment_scale(
                self.c.deployment, self.c.ns, {"spec": {"replicas": replicas}}
            )
        except ApiException as exc:
            raise self.c.error(exc, "patch", "deployments/scale", self.c.deployment) from None

    def record_hpas(self) -> list[str]:
        """The Deployment's HPAs, each recorded (spec and field managers) for the restore
        before the first hold."""
        found = self.c.hpas(full=True)
        for h in found:
            name = h["metadata"]["name"]
            if name not in self.s.hpa_held:
                self.s.hpa_held[name] = {
                    "spec": h["spec"],
                    "managedFields": h["metadata"].get("managedFields") or [],
                }
        return [h["metadata"]["name"] for h in found]

    def hold_hpa(self, name: str, replicas: int) -> None:
        """An HPA holds the count by the documented means: both directions' selectPolicy
        Disabled, and minReplicas/maxReplicas widened so the count is inside them (they are
        enforced at every sync, selectPolicy or not). To zero, min stays: a target at 0
        replicas deactivates the HPA (ScalingActive False) until the restore."""
        spec = self.s.hpa_held[name]["spec"]
        low = spec.get("minReplicas", 1)
        body = {
            "spec": {
                "minReplicas": min(low, replicas) if replicas > 0 else low,
                "maxReplicas": max(spec["maxReplicas"], replicas),
                "behavior": {
                    "scaleUp": {"selectPolicy": "Disabled"},
                    "scaleDown": {"selectPolicy": "Disabled"},
                },
            }
        }
        self.c.hpa_patch(name, body)
        self.c.emit("scaler_held", hpa=name, replicas=replicas, **body["spec"])

    def workload_scalers(self) -> list[str]:
        return [f"ScaledObject/{n}" for n in self.c.scaled_objects()] + [
            f"HorizontalPodAutoscaler/{n}" for n in self.c.hpas()
        ]

    def desired_replicas(self) -> int | None:
        return self.c.apps.read_namespaced_deployment(self.c.deployment, self.c.ns).spec.replicas

    def why_removed(self, name: str) -> str:
        """The ReplicaSet's reasons, in its own order (controller.ActivePodsWithRanks):
        not ready before ready, the lowest pod-deletion-cost, the most pods on one node,
        the shortest time ready, the most restarts, the newest."""
        with self.s.lock:
            pods = [p for p in self.s.pods.values() if p.metadata.name == name or (
                p.metadata.deletion_timestamp is None)]  # fmt: skip
        return removal_reason(name, [self.c.api.sanitize_for_serialization(p) for p in pods])

    def kill_pod(self, name: str, sig: int = signal.SIGKILL) -> None:
        """pod_kill's act: the engine container's process SIGKILLed by kube.kill_command
        (the kubelet restarts it in place: the watch sees it exit, code 137), or, with
        kube.pod_kill: delete, the pod deleted with grace 0 (the kubelet's 2 s drain)."""
        view = self.check_own_pod(name)
        k = self.c.cfg.kube
        sig_name = signal.Signals(sig).name
        if k.pod_kill == "delete":
            if sig != signal.SIGKILL:
                raise TargetError(
                    f"kube.pod_kill: delete deletes the pod; {sig_name} needs kube.pod_kill: "
                    "command and a kube.kill_command that sends {signal}"
                )
            self.c.action("kill", pod=name, by="delete, grace 0: the kubelet's 2 s drain")
            self._delete(name, 0)
            return
        if sig != signal.SIGKILL and not any("{signal}" in a for a in k.kill_command):
            raise TargetError(f"kube.kill_command does not name {{signal}}: cannot send {sig_name}")
        container, container_id = self._engine_container(name)
        fields = dict(
            namespace=self.c.ns,
            pod=name,
            container=container,
            container_id=container_id,
            node=view.node or "",
            signal=sig_name,
        )
        argv = [a.format(**fields) for a in k.kill_command]
        self.c.action(
            "kill", pod=name, signal=sig_name, container=container, by="kube.kill_command"
        )
        run_user_command(argv, "kill_command", f"killing {name}/{container}", KILL_COMMAND_S)
        # delivered by the time the command returned (its own start-up is not the kill's):
        # the pod's signal on the timeline, as the local kubelet records its own
        self.c.emit("signal", pod=name, node=view.node, signal=sig_name, by="kube.kill_command")

    def _engine_container(self, name: str) -> tuple[str, str]:
        """The engine container's name and its runtime's id ("containerd://" cut off),
        from the pod's status as the watch last saw it: a kill needs it running."""
        c = engine_status(self.s.pod(name), self.s.engine)
        if c is None or not c.container_id or c.state.running is None:
            raise TargetError(f"the engine container of {name} is not running: nothing to kill")
        return c.name, c.container_id.split("://", 1)[-1]

    def delete_pod(self, name: str, grace_s: float | None = None) -> None:
        self.check_own_pod(name)
        self.c.action("delete", pod=name, grace_s=grace_s)
        self._delete(name, grace_s)

    def _delete(self, name: str, grace_s: float | None) -> None:
        body = client.V1DeleteOptions(
            grace_period_seconds=None if grace_s is None else int(grace_s)
        )
        try:
            self.c.core.delete_namespaced_pod(name, self.c.ns, body=body)
        except ApiException as exc:
            raise self.c.error(exc, "delete", "pods", f"pod {name}") from None

    def hand_back(self, as_act: bool = True, hold_scale_in: bool = False) -> None:
        """The replica count goes back to the Deployment's own scalers (KEDA un-paused);
        from now on what they decide is theirs, on the timeline. as_act: the scenario's
        act (the disruption); else a preparation (scale_up's act is the load step).
        hold_scale_in: KEDA reads its triggers and may scale out but not in until
        release_scale_in(), so that it first reads the load it is handed (a ScaledObject
        that was never active scales to zero at its first inactive reading)."""
        keda, hpas = self.c.scaled_objects(), self.c.hpas()
        kind = "autoscaler" if as_act else "scaler_watch"
        self.c.action(kind, mode="cluster", keda=keda, hpa=hpas)
        self.scaling.release()
        self.restore.put_back_hpas()  # each decides from its own metrics again
        for so in keda:
            if hold_scale_in:
                self.c.keda_patch(so, {KEDA_PAUSE: None, KEDA_PAUSE_SCALE_IN: "true"})
                if so not in self.s.keda_paused:  # what release_scale_in and the restore clear
                    self.s.keda_paused.append(so)
            else:
                self.c.keda_pause(so, None)  # KEDA owns the replica count again
                if so in self.s.keda_paused:
                    self.s.keda_paused.remove(so)
        self.c.emit("autoscaler_handed_back", keda=keda, hpa=hpas)

    def release_scale_in(self) -> None:
        """KEDA may scale in again: the hand-over that hold_scale_in began is complete
        (on every ScaledObject it held, found then: one gone since is not patched)."""
        present = set(self.c.scaled_objects())
        for so in list(self.s.keda_paused):
            if so in present:
                self.c.keda_pause(so, None)
            self.s.keda_paused.remove(so)

    def scaler_active_since(self, t: float) -> bool | None:
        """Whether every KEDA ScaledObject on the Deployment has read its triggers as
        active since t (its status.lastActiveTime, to the second); None without one."""
        objects = self.c.scaled_objects(full=True)
        if not objects:
            return None
        times = [(o.get("status") or {}).get("lastActiveTime") for o in objects]
        return all(v is not None and _ts(v) >= int(t) for v in times)
