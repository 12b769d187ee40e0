"""The embedded local target: simulator pods behind a real nginx, Kubernetes' lifecycle."""

from __future__ import annotations

import dataclasses
import signal
from pathlib import Path

import httpx

from harness.client import http_get
from harness.cluster.local.controller import Controller, Template, scrape
from harness.cluster.local.nginx import Nginx
from harness.cluster.local.silence import SilenceError
from harness.cluster.target import (
    EvictionRefused,
    Target,
    TargetError,
    canary_rollout,
    evict_retrying,
    strategy_changes,
)
from harness.config import ConfigError, build
from harness.config.schema import RunConfig, Strategy
from harness.engines.kinds import kind_of
from harness.engines.startup import log_size, log_tail, machine_load
from harness.events import Event, EventKind, EventLog
from harness.proc import PidFile, free_port, reap_leftovers

__all__ = ["EvictionRefused", "LocalTarget"]

# controller.kubernetes.io/pod-deletion-cost: the lowest cost goes first on scale-down
DELETION_COST = -1000


class LocalTarget(Target):
    name = "local"

    def __init__(self, config: RunConfig, run_dir: Path, pd: bool = False):
        """pd: the deployment serves in two roles (prefill/decode disaggregation): the
        gateway routes to the decode Deployment (kube.deployment, `replicas`), whose
        pods' routing sidecars call the prefill Service, a second nginx before the
        prefill Deployment (<kube.deployment>-prefill, pd.prefill_replicas)."""
        self.cfg = config
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._events = EventLog(self.run_dir / "events.jsonl")
        self._recorder = _Recorder(self, self._events)
        self._pidfile = PidFile("local-target")
        self._canary_baseline: Template | None = None  # start_canary: the template before
        self.prefill: Controller | None = None
        self.prefill_service: Nginx | None = None
        engine = config.engine
        if pd:
            # the prefill role's own events (its pods, its Service's endpoints) are kept
            # apart from the decode Deployment's, which every check reads as the target's
            (self.run_dir / "prefill").mkdir(exist_ok=True)
            self._prefill_events = EventLog(self.run_dir / "prefill" / "events.jsonl")
            self.prefill_service = Nginx(
                self.run_dir / "prefill",
                free_port(),
                config.gateway.endpoint_delay_s,
                config.gateway.read_timeout_s,
                self._prefill_events.emit,
                connect_timeout_s=config.gateway.connect_timeout_s,
            )
            self.prefill = Controller(
                config,
                self.run_dir,
                _Recorder(self, self._prefill_events),
                self.prefill_service,
                deployment=f"{config.kube.deployment}-prefill",
                engine=self._engine(engine, {"pd_role": "prefill", **config.pd.prefill_engine}),
                replicas=config.pd.prefill_replicas,
                subnet=100,
                pdb=config.pd.prefill_pdb,
            )
            engine = dataclasses.replace(
                engine, pd_role="decode", pd_prefill_url=self.prefill_service.url
            )
        self.gateway = Nginx(
            self.run_dir,
            free_port(),
            config.gateway.endpoint_delay_s,
            config.gateway.read_timeout_s,
            self._emit,
            connect_timeout_s=config.gateway.connect_timeout_s,
            passive_health=(
                (config.gateway.max_fails, config.gateway.fail_timeout_s)
                if config.gateway.max_fails
                else None
            ),
            balance=config.gateway.balance,
            mirror_reads_answers=config.gateway.mirror_reads_answers,
        )
        self.controller = Controller(
            config, self.run_dir, self._recorder, self.gateway, engine=engine
        )
        self._started = False

    # --- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        kind = kind_of(self.cfg.engine)
        surge, _ = self.cfg.strategy.resolve(self.cfg.replicas)
        # a replacement overlaps the pod it replaces
        kind.preflight(self.cfg.engine, self.cfg.replicas + max(1, surge))
        if self.prefill is not None and not kind.runs_pd_locally:
            raise ConfigError(
                "a prefill/decode deployment on the local target runs the simulator: its "
                "decode pods need a routing sidecar (llm-d's) before vLLM; set engine.kind=sim"
            )
        reap_leftovers()
        self._started = True
        if self.prefill is not None:
            self.prefill_service.start()
            self._remember("nginx-prefill", self.prefill_service.proc.pid)
            self.prefill.start()
        self.gateway.start()
        self._remember("nginx", self.gateway.proc.pid)
        self.controller.start()

    def close(self) -> None:
        if self._started:
            self.controller.stop()
            self.gateway.stop()
            if self.prefill is not None:
                self.prefill.stop()
                self.prefill_service.stop()
                self._prefill_events.close()
            self._started = False
        self._events.close()
        self._pidfile.clear()

    def __enter__(self) -> LocalTarget:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _emit(self, kind: str, **kw) -> Event:
        return self._recorder.emit(kind, **kw)

    def _remember(self, name: str, pgid: int) -> None:
        self._pidfile.remember(name, pgid)

    # --- observation ---------------------------------------------------------------
    @property
    def gateway_url(self) -> str:
        return self.gateway.url

    def pods(self):
        return self.controller.views()

    def events(self) -> list[Event]:
        return self._events.all()

    def startup_progress(self) -> object:
        """The pods not yet ready, with how far each one's log has grown."""
        return sorted((p.spec.name, log_size(p.log_path)) for p in self._unready())

    def _unready(self) -> list:
        with self.controller.lock:
            return [p for p in self.controller.pods.values() if not p.ready]

    def wait_settled(
        self,
        replicas: int,
        timeout_s: float = 60.0,
        stall_s: float | None = None,
        ignoring: tuple[str, ...] = (),
    ):
        """As every target settles; a timeout also says how the machine and each pod not
        yet ready stood (the last lines of its engine's log)."""
        try:
            super().wait_settled(replicas, timeout_s, stall_s, ignoring)
            if self.prefill is not None:  # and the prefill role, its Service serving each pod
                n = self.prefill.replicas
                self.wait_for(
                    lambda: (
                        len(self.prefill_service.applied or ()) == n
                        and sum(p.ready and not p.terminating for p in self.prefill_pods()) == n
                    ),
                    timeout_s,
                    f"{n} prefill pods ready and served by the prefill Service",
                    stall_s=stall_s,
                )
        except TargetError as exc:
            pods = "; ".join(
                f"{p.spec.name} ({p.phase}) log ends: " + " | ".join(log_tail(p.log_path, 3))
                for p in self._unready()
            )
            raise TargetError(f"{exc}; {machine_load()}" + (f"; {pods}" if pods else "")) from None

    def pod_metrics(self, name: str) -> dict[str, float]:
        return scrape(self._owner(name).pod(name).spec.address)

    def wait_gateway_serving(self, timeout_s: float = 30.0) -> None:
        """Routing works and nginx has applied exactly the current ready endpoints."""
        super().wait_gateway_serving(timeout_s)

        def applied() -> bool:
            ready = {p.address for p in self.ready_pods()}
            return set(self.gateway.applied) == ready

        self.wait_for(applied, timeout_s, "the gateway to apply the ready endpoints")

    def prestop_s(self, name: str) -> float:
        return self.cfg.pod.prestop_s  # every local pod is built from the config

    def pod_health(self, name: str) -> int | None:
        try:
            address = self.controller.pod(name).spec.address
            return http_get(f"http://{address}/health", timeout=0.5).status_code
        except (KeyError, httpx.HTTPError):
            return None

    def gateway_logs(self):
        return self.gateway.access_log, self.gateway.error_log

    def engine_logs(self) -> dict[str, Path]:
        """Every pod's process output (the kubelet's log of its container)."""
        folder = self.run_dir / "pods"
        return {
            e.pod: folder / f"{e.pod}.log" for e in self.events() if e.kind == EventKind.POD_CREATED
        }

    def action(self, kind: str, **detail) -> Event:
        return self._events.emit("action", action=kind, **detail)

    # --- actions -------------------------------------------------------------------
    def rollout(self, version, engine=None, max_surge=None, max_unavailable=None, min_ready_s=None):
        template, strategy = self._candidate(
            version, engine, max_surge, max_unavailable, min_ready_s
        )
        changes = strategy_changes(max_surge, max_unavailable, min_ready_s)
        self.action("rollout", to_version=version, engine=engine or {}, **changes)
        self.controller.set_template(template, strategy)

    def _candidate(self, version, engine, max_surge, max_unavailable, min_ready_s):
        """The template of `version` (the engine's settings changed by `engine`) and the
        strategy with the changes asked for."""
        current = self.controller.template
        settings = self._engine(current.engine, engine)
        strategy = self.controller.strategy
        changes = strategy_changes(max_surge, max_unavailable, min_ready_s)
        if changes:
            strategy = dataclasses.replace(
                strategy, **{k: str(v) if k != "min_ready_s" else v for k, v in changes.items()}
            )
            Strategy.validate(strategy)
        return Template(version, settings), strategy

    @staticmethod
    def _engine(settings, changes: dict | None):
        """The engine settings with `changes` over them, validated."""
        if not changes:
            return settings
        try:
            return build(type(settings), dataclasses.asdict(settings) | changes, "engine")
        except ConfigError as exc:
            raise TargetError(str(exc)) from None

    def rollout_done(self) -> bool:
        return self.controller.rollout_done()

    def start_canary(self, version: str, engine: dict | None = None) -> None:
        act = canary_rollout(version, engine)
        surge, unavailable = act["max_surge"], act["max_unavailable"]
        template, strategy = self._candidate(version, engine, surge, unavailable, None)
        self.action("rollout", **act)
        self._canary_baseline = self.controller.template
        self.controller.set_template(template, strategy, hold_new=1)

    def promote_canary(self) -> None:
        if self._canary_baseline is None:
            raise TargetError("promote_canary: no canary was started")
        self.action("canary_promote")
        self.controller.release_hold()

    def rollback_canary(self) -> None:
        if self._canary_baseline is None:
            raise TargetError("rollback_canary: no canary was started")
        self.action("canary_rollback")
        self.controller.set_template(self._canary_baseline)

    def weight_blocker(self) -> str | None:
        return None  # nginx splits by weight (split_clients), the controller holds the rollout

    def start_candidate(
        self, version: str, engine: dict | None = None, stable_selects_candidate: bool = False
    ) -> None:
        act = canary_rollout(version, engine)
        template, strategy = self._candidate(
            version, engine, act["max_surge"], act["max_unavailable"], None
        )
        self.action("rollout", **act, weighted=True)
        self._canary_baseline = self.controller.template
        # no traffic to the candidate's pods before the first step, though they are ready
        self.controller.set_split(version, 0.0, stable_selects_candidate)
        self.controller.set_template(template, strategy, hold_new=1)

    def scale_candidate(self, replicas: int) -> None:
        self.action("candidate_scale", replicas=replicas)
        self.controller.hold_at(replicas)

    def set_weight(self, percent: float) -> None:
        if self.controller.split is None:
            raise TargetError("set_weight: no candidate was started (start_candidate)")
        version, _, overlap, mirror = self.controller.split
        self.action("canary_weight", version=version, percent=percent)
        self.controller.set_split(version, percent, overlap, mirror)

    def mirror_blocker(self) -> str | None:
        return None  # nginx's mirror, its answers read by the mirror reader

    def set_mirror(self, percent: float) -> None:
        if self.controller.split is None:
            raise TargetError("set_mirror: no candidate was started (start_candidate)")
        version, weight, overlap = self.controller.split[:3]
        self.action("mirror", version=version, percent=percent)
        self.controller.set_split(version, weight, overlap, mirror=percent)

    def mirror_log(self) -> Path | None:
        return self.gateway.mirror_log

    def end_split(self) -> None:
        if self.controller.split is not None:
            self.action("canary_weight", version=self.controller.split[0], percent=None)
            self.controller.set_split(None)

    def evict_pod(self, name: str, retry_deadline_s: float = 0.0) -> None:
        self.action("evict", pod=name)

        def attempt() -> None:
            try:
                self._owner(name).evict(name)
            except KeyError as exc:
                raise TargetError(str(exc)) from None

        # kubectl drain retries every 5 s; the local target's time is scaled down
        evict_retrying(attempt, retry_deadline_s, interval_s=0.25)

    def drain_node(self, node: str, retry_deadline_s: float = 30.0) -> list[str]:
        self.action("drain_node", node=node)
        try:
            self.controller.cordon(node)
        except KeyError as exc:
            raise TargetError(str(exc)) from None
        victims = [p.name for p in self.pods() if p.node == node and not p.terminating]
        for name in victims:
            self.evict_pod(name, retry_deadline_s)
        return victims

    def uncordon(self, node: str) -> None:
        self.controller.uncordon(node)

    def scale(self, replicas: int) -> None:
        if replicas < 0:
            raise TargetError(f"cannot scale to {replicas} replicas")
        self.action("scale", replicas=replicas)
        self.controller.scale(replicas)

    def free_gpus(self) -> tuple[int, int] | None:
        cap = self.cfg.gpus_per_node
        if not cap:
            return None
        free = sum(
            max(0, cap - sum(1 for p in self.controller.pods.values() if p.spec.node == n))
            for n in self.controller.nodes
            if n not in self.controller.cordoned
        )
        return free, 1

    def scale_down(self, pod: str) -> None:
        try:
            self.controller.pod(pod)
        except KeyError as exc:
            raise TargetError(str(exc)) from None
        replicas = self.controller.replicas - 1
        self.action("scale_down", pod=pod, replicas=replicas, deletion_cost=DELETION_COST)
        self.controller.set_deletion_cost(pod, DELETION_COST)
        self.controller.scale(replicas)

    def memory_limit_mb(self, name: str) -> float | None:
        return self.cfg.pod.memory_limit_mb

    def kill_pod(self, name: str, sig: int = signal.SIGKILL) -> None:
        self.action("kill", pod=name, signal=signal.Signals(sig).name)
        try:
            self._owner(name).pod(name).signal(sig)
        except KeyError as exc:
            raise TargetError(str(exc)) from None

    def delete_pod(self, name: str, grace_s: float | None = None) -> None:
        self.action("delete", pod=name, grace_s=grace_s)
        try:
            self._owner(name).delete(name, grace_s)
        except KeyError as exc:
            raise TargetError(str(exc)) from None

    def _owner(self, name: str) -> Controller:
        """The controller of the Deployment the pod belongs to (a prefill pod's, with P/D)."""
        if self.prefill is not None:
            with self.prefill.lock:
                if name in self.prefill.pods:
                    return self.prefill
        return self.controller

    def adapter_blocker(self) -> str | None:
        if not self.cfg.engine.runtime_lora:
            return (
                "the engines do not load adapters at run time: set engine.runtime_lora=true "
                "(vLLM: --enable-lora with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)"
            )
        return None

    def load_adapter(self, pod: str, name: str, path: str, inplace: bool = False) -> None:
        """As every target loads one; a real engine here loads the adapter built for the
        local model under that path (harness.engines.vllm.adapter_dir, one per path, built
        on first use): adapter.path/<version> names weights of its own."""
        path = kind_of(self.cfg.engine).adapter_path(self.cfg.engine, path)
        super().load_adapter(pod, name, path, inplace)

    # --- prefill/decode disaggregation ----------------------------------------------------
    def pd_blocker(self) -> str | None:
        if self.prefill is None:
            return "this local target was started without a prefill role"
        return None

    def _role(self, role: str) -> Controller:
        if role == "decode":
            return self.controller
        if role == "prefill" and self.prefill is not None:
            return self.prefill
        raise TargetError(f"no {role} role here (roles: decode, prefill with a P/D target)")

    def prefill_pods(self):
        return self._role("prefill").views()

    def pd_rollout(self, roles: tuple[str, ...], version: str, engine: dict | None = None) -> Event:
        controllers = [self._role(r) for r in roles]  # each known before any is touched
        templates = [
            Template(version, self._engine(c.template.engine, engine)) for c in controllers
        ]
        acted = self.action("rollout", to_version=version, roles=list(roles), engine=engine or {})
        for controller, template in zip(controllers, templates, strict=True):
            controller.set_template(template)
        return acted

    def pd_rollout_done(self, role: str) -> bool:
        return self._role(role).rollout_done()

    def pd_scale(self, role: str, replicas: int) -> Event:
        controller = self._role(role)
        acted = self.action("scale", role=role, replicas=replicas)
        controller.scale(replicas)
        return acted

    def prefill_service_log(self) -> Path | None:
        return self.prefill_service.access_log if self.prefill_service else None

    def prefill_events(self) -> list[Event]:
        return self._prefill_events.all() if self.prefill is not None else []

    def node_loss_blocker(self) -> str | None:
        return None  # its nodes' pods freeze and their ports fall silent (controller)

    def lose_node(self, node: str) -> None:
        """The node loses power: its pods' processes freeze and their ports answer no
        new connection; the local control plane hears nothing from it, marks it after
        node_monitor_grace_s and deletes its pods after their toleration."""
        victims = [p.name for p in self.pods() if p.node == node and not p.terminating]
        self.action("node_loss", node=node, pods=victims)
        try:
            self.controller.lose_node(node)
        except (KeyError, SilenceError) as exc:
            raise TargetError(str(exc)) from None
        for pod in victims:
            self._emit("node_lost", pod=pod, node=node)

    def return_node(self, node: str, timeout_s: float = 60.0) -> None:
        self.controller.return_node(node)
        self.action("node_returned", node=node)

    def set_autoscaler(self, policy: str) -> None:
        self.action("autoscaler", policy=policy)
        self.controller.autoscaler = dataclasses.replace(self.controller.autoscaler, policy=policy)
        self.controller.autoscaling = True


class _Recorder:
    """A controller's event sink: its log, with pids remembered."""

    def __init__(self, target: LocalTarget, log: EventLog):
        self.target, self.log = target, log

    def emit(self, kind: str, **kw) -> Event:
        ev = self.log.emit(kind, **kw)
        if kind == "container_started":
            self.target._remember(kw.get("pod", "?"), kw["pid"])
        return ev
