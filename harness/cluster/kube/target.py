"""The Kubernetes target, composed of its parts (see harness/cluster/kube/__init__.py).

Each part receives what it uses: the connection and the workload's coordinates
(`Cluster`), the state the parts share (`Shared`: the pods the watches see, what the
restore must put back), and the other parts it calls. KubeTarget builds them at start()
and answers the Target interface through them.
"""

from __future__ import annotations

import signal
from pathlib import Path

from kubernetes import client

from harness.cluster.kube.actions import Actions
from harness.cluster.kube.common import (
    CANDIDATE_LABEL,
    Cluster,
    Shared,
    connect,
    engine_of,
    prestop_s,
)
from harness.cluster.kube.nodeloss import NodeLoss
from harness.cluster.kube.pd import PrefillRole
from harness.cluster.kube.pods import PodAccess
from harness.cluster.kube.preemption import Preemption
from harness.cluster.kube.preflight import Preflight
from harness.cluster.kube.restore import Restore
from harness.cluster.kube.scaling import HARNESS_MANAGER, ScalerObserver
from harness.cluster.kube.split import WeightedSplit
from harness.cluster.kube.watches import Watches
from harness.cluster.target import CannotRun, PodView, Target, TargetError, canary_rollout
from harness.config.schema import RunConfig
from harness.events import Event, EventLog


def runtime_lora_blocker(container, deployment: str) -> str | None:
    """Why the engine container (the API's V1Container) does not load LoRA adapters at run
    time: vLLM needs --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (a value from
    a ConfigMap or Secret is taken as set), rollcheck's simulator --runtime-lora."""
    if container is None:
        return f"Deployment {deployment} has no containers"
    argv = [str(a) for a in (container.command or []) + (container.args or [])]
    words = {w for a in argv for w in a.split()}  # `sh -c "vllm serve ... --enable-lora"`
    if "--runtime-lora" in words:
        return None
    env = {e.name: e for e in container.env or []}
    allowed = env.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING")
    allowed_ok = allowed is not None and (
        allowed.value_from is not None or str(allowed.value).strip().lower() in ("true", "1")
    )
    if "--enable-lora" in words and allowed_ok:
        return None
    missing = [x for x, ok in (("--enable-lora", "--enable-lora" in words),
                               ("VLLM_ALLOW_RUNTIME_LORA_UPDATING=True", allowed_ok)) if not ok]  # fmt: skip
    return (
        f"the engine container {container.name} of Deployment {deployment} does not load "
        f"LoRA adapters at run time: it lacks {' and '.join(missing)} (vLLM's runtime "
        "adapter endpoints; rollcheck's simulator: --runtime-lora)"
    )


class KubeTarget(Target):
    name = "kube"

    def __init__(
        self,
        cfg: RunConfig,
        run_dir: Path,
        api: client.ApiClient | None = None,
        kind: str | None = None,
    ):
        self.cfg = cfg
        self.kind = kind  # the scenario's kind: the permissions asked before acting
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
        self.shared = Shared()
        self.restored: list[str] = []
        # the parts, built by start() once connected
        self.cluster: Cluster | None = None
        self.preflight: Preflight | None = None
        self.watches: Watches | None = None
        self.restorer: Restore | None = None
        self.actions: Actions | None = None
        self.access: PodAccess | None = None
        self.preemption: Preemption | None = None
        self.node_loss: NodeLoss | None = None
        self.split: WeightedSplit | None = None
        self.prefill: PrefillRole | None = None  # a P/D deployment's prefill role
        self._weighted: tuple[str, dict | None] | None = None  # weighted_canary's (version, engine)

    # --- lifecycle ---------------------------------------------------------------
    def start(self) -> None:
        api = self._api or connect(self.k.kubeconfig, self.k.context)
        # the harness's own writes carry its name (managedFields), so the replica
        # changes that are not its own can be told apart and named
        api.user_agent = f"{HARNESS_MANAGER}/1"
        c = self.cluster = Cluster(api, self.cfg, self.run_dir, self._events)
        s = self.shared
        self.preflight = Preflight(c, s, self.kind)
        self.watches = Watches(c, s, self.scaling)
        self.restorer = Restore(c, s, self.scaling.release)
        self.actions = Actions(c, s, self.restorer, self.scaling, self.pods)
        self.access = PodAccess(c, s, self.auth_headers)
        self.preemption = Preemption(c, s, self.restorer.mark_pending)
        self.node_loss = NodeLoss(c, s, self.restorer.mark_pending, self.pods)
        self.split = WeightedSplit(c, s, self.restorer.mark_pending, self.watches.watch_candidate)
        pd_kind = self.kind in ("pd_rollout", "pd_prefill")
        self.prefill = PrefillRole(
            c, s, self.restorer.mark_pending, self.actions.rollout_body, log=pd_kind
        )
        dep = self.preflight.check()
        self.preflight.engine(dep)
        self.preflight.lint(dep)
        selector = self.k.selector or ",".join(
            f"{k}={v}" for k, v in (dep.spec.selector.match_labels or {}).items()
        )
        # a weighted canary's candidate pods have a watch of their own (watch_candidate)
        self.watches.start(f"{selector},!{CANDIDATE_LABEL}" if selector else f"!{CANDIDATE_LABEL}")
        self.restorer.record(dep)
        scalers = self.workload_scalers()
        if scalers:
            self._events.emit("workload_scalers", names=scalers)
        if self.k.gateway_pods_selector and not self.k.gateway_log_files:
            self.watches.follow_gateway_logs()
        no_gateway_log = not self.k.gateway_pods_selector and not self.k.gateway_log_files
        # a P/D rollout traces each answer's prefill pod through its decode pod's log
        pd = pd_kind and self.prefill.name is not None
        if (
            self.k.engine_logs == "always"
            or (self.k.engine_logs == "auto" and no_gateway_log)
            or pd
        ):
            self.watches.follow_engine_logs()
        if pd:
            self.prefill.start()

    def close(self) -> None:
        if self.node_loss is not None:
            self.node_loss.stop()
        try:
            unloaded = self.unload_run_adapters()
            if unloaded:
                self.cluster.emit("restored", what=unloaded)
            if self.shared.original is not None and self.shared.marked:
                self.restore()
            self.restored = unloaded + (self.restored or [])
        finally:
            if self.split is not None:
                self.split.stop()
            if self.prefill is not None:
                self.prefill.stop()
            if self.watches is not None:
                self.watches.stop_logs()
                self.watches.stop()
            self._events.close()

    def restore(self) -> list[str]:
        """Put back what the run changed (replicas, template, strategy, cordons, KEDA)."""
        self.restored = self.restorer.restore()
        return self.restored

    def interrupt_watches(self) -> None:
        """Break every watch connection once (tests the resume path)."""
        self.watches.interrupt()

    # --- observation -------------------------------------------------------------
    @property
    def gateway_url(self) -> str:
        if not self.k.gateway_url:
            raise TargetError("kube.gateway_url is not set: the URL clients use (the ingress)")
        return self.k.gateway_url

    @property
    def lint_findings(self) -> list:
        return self.preflight.lint_findings if self.preflight is not None else []

    @property
    def pod_access_problem(self) -> str | None:
        """How the pods' engines were tried, when no way to them worked."""
        return self.access.problem if self.access is not None else None

    def pods(self) -> list[PodView]:
        return self.watches.views()

    def events(self) -> list[Event]:
        return sorted(self._events.all(), key=lambda e: e.t)

    def prestop_s(self, name: str) -> float:
        pod = self.shared.pod(name)
        return prestop_s(engine_of(pod.spec, self.shared.engine)) if pod is not None else 0.0

    def pod_metrics(self, name: str) -> dict[str, float]:
        return self.access.pod_metrics(name)

    def pod_health(self, name: str) -> int | None:
        return self.access.pod_health(name)

    def pod_endpoint(self, name: str) -> tuple[str, dict]:
        return self.access.pod_endpoint(name)

    def busiest_pod(self, min_in_flight: int = 1, timeout_s: float = 30.0, prefer=None, among=None):
        try:
            return super().busiest_pod(min_in_flight, timeout_s, prefer, among)
        except TargetError as exc:
            if self.pod_access_problem:  # the pods were never read: say how it was tried
                raise TargetError(f"{exc}; {self.pod_access_problem}") from None
            raise

    def gateway_logs(self):
        if self.watches is not None and self.watches.gw_files:
            return self.watches.gw_files
        files = self.k.gateway_log_files
        access = Path(files[0]) if files else None
        error = Path(files[1]) if len(files) > 1 else None
        return access, error

    def engine_logs(self) -> dict[str, Path]:
        return self.watches.engine_log_files() if self.watches is not None else {}

    def action(self, kind: str, **detail) -> Event:
        return self._events.emit("action", action=kind, **detail)

    def pod_probes(self) -> dict:
        return self.preflight.pod_probes()

    def relint(self, min_startup_s: float) -> None:
        self.preflight.relint(min_startup_s)

    # --- what this cluster allows ------------------------------------------------
    def node_drain_blocker(self) -> str | None:
        return self.preflight.node_drain_blocker()

    def preemption_blocker(self) -> str | None:
        return self.preemption.blocker()

    def node_loss_blocker(self) -> str | None:
        return self.node_loss.blocker()

    def free_gpus(self) -> tuple[int, int] | None:
        return self.preflight.free_gpus()

    def candidate_image(self, version: str) -> str | None:
        return self.preflight.candidate_image(version)

    def candidate_problem(self, version: str, engine: dict, key: str) -> str | None:
        problem = super().candidate_problem(version, engine, key)
        if problem or engine:
            return problem
        return self.preflight.image_problem(version)

    def scaler(self) -> str:
        return self.k.scaler

    def autoscaler_blocker(self, to_zero: bool = False) -> str | None:
        return self.preflight.autoscaler_blocker(to_zero)

    # --- actions -----------------------------------------------------------------
    def check_own_pod(self, name: str) -> PodView:
        return self.actions.check_own_pod(name)

    def rollout(self, version, engine=None, max_surge=None, max_unavailable=None, min_ready_s=None):
        self.actions.rollout(version, engine, max_surge, max_unavailable, min_ready_s)

    def rollout_done(self) -> bool:
        return self.actions.rollout_done()

    def start_canary(self, version: str, engine: dict | None = None) -> None:
        self.actions.start_canary(version, engine)

    def promote_canary(self) -> None:
        if self._weighted is not None:  # the Deployment itself goes to the candidate's version
            self.actions.rollout(*self._weighted)
            return
        self.actions.promote_canary()

    def rollback_canary(self) -> None:
        if self._weighted is not None:  # the candidate Deployment removed
            self.cluster.action("canary_rollback")
            self.split.settle()  # weight 0 applied first: the candidate gets nothing new
            self.split.remove_candidate()
            return
        self.actions.rollback_canary()

    # --- LoRA adapters: each pod's engine asked directly, as the golden prompts are --
    def adapter_blocker(self) -> str | None:
        return runtime_lora_blocker(
            engine_of(self.cluster.read_deployment().spec.template.spec, self.shared.engine),
            self.k.deployment,
        )

    # --- prefill/decode: the decode role is the Deployment, the prefill role its own ---
    def pd_blocker(self) -> str | None:
        if self.kind == "pd_prefill":
            return (
                "pd_prefill judges the decode pods by the prefill Service's log, which a "
                "cluster's Service does not keep: it runs on the local target"
            )
        return self.prefill.blocker()

    def prefill_pods(self) -> list[PodView]:
        return self.prefill.pods()

    def prefill_events(self) -> list[Event]:
        return self.prefill.all_events()

    def pd_rollout(self, roles: tuple[str, ...], version: str, engine: dict | None = None) -> Event:
        acted = self.cluster.action(
            "rollout", to_version=version, roles=list(roles), engine=engine or {}
        )
        for role in roles:
            if role == "prefill":
                self.prefill.rollout(version, engine)
            else:
                self.actions.start_rollout(version, engine)  # under the one act above
        return acted

    def pd_rollout_done(self, role: str) -> bool:
        return self.prefill.rollout_done() if role == "prefill" else self.actions.rollout_done()

    # --- weighted canary and shadow: a candidate Deployment, the user's HTTPRoute -------
    def weight_blocker(self) -> str | None:
        return self.split.blocker()

    def start_candidate(
        self, version: str, engine: dict | None = None, stable_selects_candidate: bool = False
    ) -> None:
        if stable_selects_candidate:
            raise CannotRun(
                "weighted_canary.stable_selects_candidate stands for a misconfigured Service on "
                "the local target; on a cluster the Services' own selectors decide"
            )
        act = canary_rollout(version, engine)
        self.cluster.action("rollout", **act, weighted=True)
        change = self.actions.rollout_body(
            self.cluster.read_deployment(), version, engine, None, None
        )
        self._weighted = (version, engine)
        self.split.start(version, change)

    def scale_candidate(self, replicas: int) -> None:
        self.cluster.action("candidate_scale", replicas=replicas)
        self.split.scale(replicas)

    def set_weight(self, percent: float) -> None:
        self.cluster.action("canary_weight", version=self.split.version, percent=percent)
        self.split.set_weight(percent)

    def mirror_blocker(self) -> str | None:
        return self.split.mirror_blocker()

    def set_mirror(self, percent: float) -> None:
        self.cluster.action("mirror", version=self.split.version, percent=percent)
        self.split.set_mirror(percent)

    def end_split(self) -> None:
        if self.shared.route or self.shared.candidate:
            self.cluster.action("canary_weight", version=self.split.version, percent=None)
            self.split.end()

    def evict_pod(self, name: str, retry_deadline_s: float = 0.0) -> None:
        self.actions.evict_pod(name, retry_deadline_s)

    def drain_node(self, node: str, retry_deadline_s: float = 30.0) -> list[str]:
        self.check_node_drain(node)
        return self.actions.drain_node(node, retry_deadline_s)

    def uncordon(self, node: str) -> None:
        self.actions.uncordon(node)

    def scale(self, replicas: int) -> None:
        self.actions.scale(replicas)

    def scale_down(self, pod: str) -> None:
        self.actions.scale_down(pod)

    def kill_pod(self, name: str, sig: int = signal.SIGKILL) -> None:
        self.actions.kill_pod(name, sig)

    def memory_limit_mb(self, name: str) -> float | None:
        """The engine container's limits.memory, from the pod as the watch saw it."""
        from harness.podspec import memory_gib

        pod = self.shared.pod(name)
        c = engine_of(pod.spec, self.shared.engine) if pod is not None else None
        limits = (c.resources.limits or {}) if c is not None and c.resources else {}
        gib = memory_gib(limits["memory"]) if "memory" in limits else None
        return None if gib is None else gib * 1024

    def delete_pod(self, name: str, grace_s: float | None = None) -> None:
        self.actions.delete_pod(name, grace_s)

    def preempt(self, name: str) -> None:
        self.check_own_pod(name)
        self.preemption.start(name)

    def lose_node(self, node: str) -> None:
        self.node_loss.lose(node)

    def return_node(self, node: str, timeout_s: float = 60.0) -> None:
        self.node_loss.back()
        if not self.node_loss.wait_ready(node, timeout_s):
            self.action("node_not_back", node=node, waited_s=timeout_s)

    def end_preemption(self) -> None:
        removed = self.preemption.end()
        self.action("preemptor_gone", removed=removed)

    # --- the workload's own scalers ------------------------------------------------
    def workload_scalers(self) -> list[str]:
        return self.actions.workload_scalers()

    def hold_count(self, replicas: int) -> None:
        """With a ScaledObject or HPA on the Deployment, the count is set and held (KEDA
        paused at it; an HPA that changes it anyway is named as a fight), so nothing but
        the scenario's own act moves it; the restore hands it back."""
        if self.workload_scalers():
            self.scale(replicas)

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
        self.actions.hand_back(as_act, hold_scale_in)

    def release_scale_in(self) -> None:
        self.actions.release_scale_in()

    def scaler_active_since(self, t: float) -> bool | None:
        return self.actions.scaler_active_since(t)

    def desired_replicas(self) -> int | None:
        return self.actions.desired_replicas()

    def why_removed(self, name: str) -> str:
        return self.actions.why_removed(name)
