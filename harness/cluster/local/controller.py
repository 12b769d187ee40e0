"""The local control plane: Deployment, ReplicaSets, endpoints, PDB, nodes, autoscaler.

One reconcile loop, with Kubernetes' rules where they decide the fate of a stream:
- rolling update (pkg/controller/deployment/rolling.go): scale the new ReplicaSet
  up while all pods < replicas + maxSurge; scale old ones down while available
  pods stay >= replicas - maxUnavailable; "available" means ready for minReadySeconds;
  terminating pods do not count, unless `gpu_bound` (facts.md's model);
- scale-down picks not-ready pods first, then the newest;
- eviction is refused (HTTP 429 in Kubernetes) when it would leave fewer healthy
  pods than the PDB's minAvailable;
- endpoints are the ready, non-terminating pods; the gateway learns of them late;
- a node that lost power (lose_node) is marked after node_monitor_grace_s without word
  from its kubelet: Ready Unknown, the unreachable taint, its pods not ready; they are
  deleted once their toleration of the taint (pod.unreachable_toleration_s) runs out,
  and stay terminating until the node is back (return_node).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from harness.client import http_get
from harness.cluster.local.kubelet import PodRunner, PodSpec
from harness.cluster.local.nginx import Nginx, Split
from harness.cluster.target import EvictionRefused, PodView
from harness.config.schema import PDB, RunConfig
from harness.engines.kinds import kind_of
from harness.events import EventLog
from harness.prometheus import parse_metrics
from harness.sim.settings import SimSettings

TICK_S = 0.05
UNREACHABLE = "node.kubernetes.io/unreachable"


@dataclass(frozen=True)
class Template:
    version: str
    engine: SimSettings


class Controller:
    """One Deployment's controllers. A P/D deployment has two (harness/cluster/local/
    target.py): `deployment` names each one's pods, `engine`, `replicas` and `pdb` are its
    own (default: the config's), and `subnet` keeps their pods' addresses apart."""

    def __init__(
        self,
        config: RunConfig,
        run_dir: Path,
        events: EventLog,
        gateway: Nginx,
        *,
        deployment: str | None = None,
        engine: SimSettings | None = None,
        replicas: int | None = None,
        subnet: int = 0,
        pdb: PDB | None = None,
    ):
        self.cfg = config
        self.run_dir = run_dir
        self.events = events
        self.gateway = gateway
        self.deployment = deployment or config.kube.deployment
        self.subnet = subnet
        self.pdb = config.pdb if pdb is None else pdb
        self.replicas = config.replicas if replicas is None else replicas
        self.strategy = config.strategy
        self.template = Template(config.version, engine or config.engine)
        self.pods: dict[str, PodRunner] = {}
        self.templates: dict[str, Template] = {}  # pod name -> its template
        self.cores: dict[str, int] = {}  # pod name -> the CPU its real engine is bound to
        # real engines start a few at a time, as many as the machine has free cores
        self.start_gate = kind_of(config.engine).start_gate()
        self.nodes = [f"node-{i}" for i in range(config.nodes)]
        self.cordoned: set[str] = set()
        self.lost: dict[str, float] = {}  # node -> when it lost power (time.time())
        # lost nodes the controller has marked, and when (the taint's toleration runs from it)
        self.unreachable: dict[str, float] = {}
        self.autoscaler = config.autoscaler
        self.autoscaling = False  # the deployment's scaler acts only once a scenario enables it
        self.lock = threading.RLock()
        self._seq = 0
        self._ip_seq = 0
        self._endpoints: tuple[str, ...] = ()
        # weighted_canary and shadow: (the candidate's version, its percent, whether the
        # stable backend selects the candidate's pods too, the percent mirrored to it);
        # None: every endpoint alike
        self.split: tuple[str, float, bool, float] | None = None
        self._split: Split | None = None
        self._capacity: tuple | None = None
        self._rolling = False
        self.hold_new: int | None = None  # set_template(hold_new=...): a canary's hold
        self._idle_since: float | None = None
        self._prev_finished: dict[str, float] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"controller-{self.deployment}", daemon=True
        )
        (run_dir / "pods").mkdir(parents=True, exist_ok=True)

    # --- API used by the target ---------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        with self.lock:
            pods = list(self.pods.values())
        for pod in pods:
            pod.node_back()  # a lost node's frozen containers end with the rest
            pod.delete(grace_s=0)
        for pod in pods:
            pod.done.wait(10)

    def wake(self) -> None:
        self._wake.set()

    def set_template(self, template: Template, strategy=None, hold_new: int | None = None) -> None:
        """Roll to `template`. hold_new: the rollout holds once the new ReplicaSet has that
        many pods, and takes no old one down (a paused Deployment, as a canary's), until
        release_hold(); a later set_template releases it too."""
        with self.lock:
            if strategy is not None:
                self.strategy = strategy
            self.template = template
            self.hold_new = hold_new
            self._rolling = True
            self.events.emit(
                "rollout_started", version=template.version, detail_strategy=str(self.strategy)
            )
        self.wake()

    def set_split(
        self, version: str | None, percent: float = 0.0, overlap: bool = False, mirror: float = 0.0
    ) -> None:
        """From now on the gateway sends percent of the requests to `version`'s ready pods
        and the rest to the others (overlap: to every ready pod), and copies mirror percent
        of them to `version`'s pods; None: no split."""
        with self.lock:
            self.split = None if version is None else (version, percent, overlap, mirror)
            self._sync_endpoints()

    def hold_at(self, pods: int) -> None:
        """A held rollout (set_template(hold_new=...)) holds at this many new pods now."""
        with self.lock:
            self.hold_new = pods
        self.wake()

    def release_hold(self) -> None:
        with self.lock:
            self.hold_new = None
        self.wake()

    def scale(self, replicas: int, by: str = "user") -> None:
        with self.lock:
            self.events.emit("scale", replicas_from=self.replicas, replicas_to=replicas, by=by)
            self.replicas = replicas
        self.wake()

    def set_deletion_cost(self, name: str, cost: int) -> None:
        with self.lock:
            self.pods[name].deletion_cost = cost
            self.events.emit("deletion_cost", pod=name, cost=cost)

    def evict(self, name: str) -> None:
        with self.lock:
            pod = self.pods.get(name)
            if pod is None or pod.terminating:
                raise KeyError(f"no running pod named {name!r}")
            min_healthy = self.pdb.min_healthy(self.replicas)
            healthy = sum(1 for p in self.pods.values() if p.ready and not p.terminating)
            if min_healthy is not None and pod.ready and healthy - 1 < min_healthy:
                self.events.emit(
                    "eviction_refused", pod=name, healthy=healthy, min_available=min_healthy
                )
                raise EvictionRefused(
                    f"evicting {name} would leave {healthy - 1} healthy pods, "
                    f"below the PDB's minimum of {min_healthy}"
                )
            self.events.emit("evicted", pod=name, node=pod.spec.node, version=pod.spec.version)
            pod.delete()
        self.wake()

    def delete(self, name: str, grace_s: float | None = None) -> None:
        with self.lock:
            pod = self.pods.get(name)
            if pod is None:
                raise KeyError(f"no pod named {name!r}")
            self.events.emit("deleted", pod=name, grace_s=grace_s)
            pod.delete(grace_s)
        self.wake()

    def cordon(self, node: str) -> None:
        if node not in self.nodes:
            raise KeyError(f"no node named {node!r}; nodes: {', '.join(self.nodes)}")
        with self.lock:
            self.cordoned.add(node)
            self.events.emit("cordoned", node=node)

    def uncordon(self, node: str) -> None:
        with self.lock:
            self.cordoned.discard(node)
            self.events.emit("uncordoned", node=node)
        self.wake()

    def lose_node(self, node: str) -> list[str]:
        """`node` loses power: its pods freeze and its kubelet falls silent; the pods."""
        if node not in self.nodes:
            raise KeyError(f"no node named {node!r}; nodes: {', '.join(self.nodes)}")
        with self.lock:
            self.lost[node] = time.time()
            pods = [p for p in self.pods.values() if p.spec.node == node]
        for pod in pods:  # outside the lock: each freezes and fills its port's queue
            pod.lose_node()
        return [p.spec.name for p in pods]

    def return_node(self, node: str) -> None:
        """The lost node is back: its pods' containers are found dead; the kubelet,
        heard again, restarts them or completes their deletion; the node is Ready."""
        with self.lock:
            if self.lost.pop(node, None) is None:
                return
            pods = [p for p in self.pods.values() if p.spec.node == node]
        for pod in pods:
            pod.node_back()
        with self.lock:
            if node in self.unreachable:
                del self.unreachable[node]
                self.events.emit("node_ready", node=node, status="True", reason="KubeletReady")
                self.events.emit("node_taints", node=node, taints=[])
        self.wake()

    def _watch_nodes(self, now: float) -> None:
        """The node lifecycle controller: a lost node is marked once its kubelet has been
        silent for node_monitor_grace_s, and its pods are deleted once their toleration of
        the unreachable taint has run out (the taint manager's eviction)."""
        grace, tolerate = self.cfg.node_monitor_grace_s, self.cfg.pod.unreachable_toleration_s
        for node, since in self.lost.items():
            on_node = [p for p in self.pods.values() if p.spec.node == node]
            if node not in self.unreachable and now - since >= grace:
                marked = self.events.emit(
                    "node_not_ready", node=node, status="Unknown", reason="NodeStatusUnknown"
                )
                self.unreachable[node] = marked.t  # the taint's toleration runs from here
                self.events.emit("node_taints", node=node, taints=[UNREACHABLE])
                for pod in on_node:
                    pod.mark_not_ready("node not ready")
            if node in self.unreachable and now - self.unreachable[node] >= tolerate:
                for pod in on_node:
                    if not pod.terminating:
                        self.events.emit("taint_eviction", pod=pod.spec.name, taint=UNREACHABLE)
                        pod.delete()

    def views(self) -> list[PodView]:
        with self.lock:
            return [
                PodView(
                    p.spec.name,
                    p.spec.version,
                    p.spec.node,
                    p.spec.address,
                    p.phase,
                    p.ready,
                    p.terminating,
                    p.restarts,
                    p.created_at,
                )
                for p in self.pods.values()
            ]

    def pod(self, name: str) -> PodRunner:
        with self.lock:
            if name not in self.pods:
                raise KeyError(f"no pod named {name!r}")
            return self.pods[name]

    def rollout_done(self) -> bool:
        with self.lock:
            return not self._rolling

    # --- the reconcile loop ---------------------------------------------------
    def _loop(self) -> None:
        next_scale = time.monotonic()
        while not self._stop.is_set():
            self._wake.wait(TICK_S)
            self._wake.clear()
            with self.lock:
                self._watch_nodes(time.time())
                self._reap()
                self._reconcile()
                self._sync_endpoints()
            if (
                self.autoscaling
                and self.autoscaler.policy != "none"
                and time.monotonic() >= next_scale
            ):
                next_scale = time.monotonic() + self.autoscaler.period_s
                self._autoscale()

    def _reap(self) -> None:
        for name, pod in list(self.pods.items()):
            if pod.done.is_set():
                del self.pods[name]
                self.templates.pop(name, None)
                self.cores.pop(name, None)
                self.events.emit(
                    "pod_removed", pod=name, node=pod.spec.node, version=pod.spec.version
                )

    def _available(self, pod: PodRunner, now: float) -> bool:
        if not pod.ready or pod.terminating or pod.ready_since is None:
            return False
        return now - pod.ready_since >= self.strategy.min_ready_s

    def _reconcile(self) -> None:
        now = time.time()
        active = [p for p in self.pods.values() if not p.terminating]
        new = [p for p in active if self.templates[p.spec.name] == self.template]
        old = [p for p in active if self.templates[p.spec.name] != self.template]
        replicas = self.replicas
        if not old:
            if len(new) < replicas:
                for _ in range(replicas - len(new)):
                    if self._create() is None:
                        break
            elif len(new) > replicas:
                for pod in _scale_down_order(new)[: len(new) - replicas]:
                    pod.delete()
            if self._rolling and sum(self._available(p, now) for p in new) >= replicas:
                self._rolling = False
                self.events.emit("rollout_complete", version=self.template.version)
            self._record_capacity(active, now)
            return
        surge, unavailable = self.strategy.resolve(replicas)
        holding = len(self.pods) if self.strategy.gpu_bound else len(active)
        if self.hold_new is not None:  # paused at the canary: the new pods it holds, no more
            for _ in range(self.hold_new - len(new)):
                if self._create() is None:
                    break
            self._record_capacity(active, now)
            return
        # scale up the new ReplicaSet
        room = replicas + surge - holding
        if room > 0 and len(new) < replicas:
            for _ in range(min(room, replicas - len(new))):
                if self._create() is None:
                    break
                self.events.emit(
                    "rollout_step", action="scale_up_new", version=self.template.version
                )
        # scale down old ReplicaSets
        min_available = replicas - unavailable
        new_unavailable = sum(1 for p in new if not self._available(p, now))
        max_down = len(active) - min_available - new_unavailable
        unhealthy_old = [p for p in old if not p.ready]
        for pod in unhealthy_old[: max(0, max_down)]:
            pod.delete()
            self.events.emit("rollout_step", action="delete_unready_old", pod=pod.spec.name)
        max_down -= min(len(unhealthy_old), max(0, max_down))
        available = sum(1 for p in active if self._available(p, now))
        can_remove = min(max_down, available - min_available)
        for pod in _scale_down_order([p for p in old if p.ready])[: max(0, can_remove)]:
            pod.delete()
            self.events.emit(
                "rollout_step", action="scale_down_old", pod=pod.spec.name, version=pod.spec.version
            )
        self._record_capacity(active, now)

    def _record_capacity(self, active: list[PodRunner], now: float) -> None:
        cap = (
            sum(1 for p in active if p.ready),
            sum(1 for p in active if self._available(p, now)),
            len(self.pods),
        )
        if cap != self._capacity:
            self._capacity = cap
            self.events.emit(
                "capacity", ready=cap[0], available=cap[1], pods=cap[2], replicas=self.replicas
            )

    def _create(self) -> PodRunner | None:
        """A new pod of the current template, or None while no node has room (Pending)."""
        node = self._schedule()
        if node is None:
            return None
        self._seq += 1
        t = self.template
        name = f"{self.deployment}-{t.version}-{self._seq}"
        ip, port = self._address()
        engine = replace(t.engine, host=ip, port=port, model_version=t.version)
        self.cores[name] = self._least_used_core()
        command, env = kind_of(engine).command(engine, core=self.cores[name])
        spec = PodSpec(name, t.version, node, ip, port, command, self.cfg.pod, env)
        pod = PodRunner(
            spec,
            self.events.emit,
            self.run_dir / "pods",
            on_change=self.wake,
            start_gate=self.start_gate,
        )
        self.pods[name] = pod
        self.templates[name] = t
        self.events.emit(
            "pod_created", pod=name, node=spec.node, version=t.version, address=spec.address
        )
        pod.start()
        return pod

    def _least_used_core(self) -> int:
        """The CPU a new real engine is bound to: the one the fewest live pods use (vLLM's
        CPU backend binds its engine core to one CPU; a replacement bound to the CPU of
        the pod that carries the load would halve both)."""
        used = Counter(self.cores.get(name) for name, p in self.pods.items() if not p.terminating)
        return min(range(os.cpu_count() or 1), key=lambda c: (used[c], c))

    def _schedule(self) -> str | None:
        """The least-loaded schedulable node with a free GPU."""
        # a cordoned node, and one tainted unreachable, takes no new pod
        load = {n: 0 for n in self.nodes if n not in self.cordoned and n not in self.unreachable}
        for p in self.pods.values():
            if p.spec.node in load:
                load[p.spec.node] += 1  # a terminating pod still holds its GPU
        cap = self.cfg.gpus_per_node
        fits = [n for n, used in load.items() if not cap or used < cap]
        return min(fits, key=lambda n: load[n]) if fits else None

    def _address(self) -> tuple[str, int]:
        self._ip_seq += 1
        ip = f"127.{self.subnet}.{1 + self._ip_seq // 250}.{1 + self._ip_seq % 250}"
        with socket.socket() as s:
            s.bind((ip, 0))
            return ip, s.getsockname()[1]

    def _sync_endpoints(self) -> None:
        ready = {p.spec.address: p for p in self.pods.values() if p.ready and not p.terminating}
        endpoints = tuple(sorted(ready))
        split = None
        if self.split is not None:
            version, percent, overlap, mirror = self.split
            mine = tuple(a for a in endpoints if ready[a].spec.version == version)
            rest = endpoints if overlap else tuple(a for a in endpoints if a not in mine)
            split = Split(version, percent, mine, rest, mirror)
        if (endpoints, split) == (self._endpoints, self._split):
            return
        before = set(self._endpoints)
        addrs = {p.spec.address: p for p in self.pods.values()}
        for a in sorted(set(endpoints) - before):
            p = addrs[a]
            self.events.emit(
                "endpoint_added",
                pod=p.spec.name,
                node=p.spec.node,
                version=p.spec.version,
                address=a,
            )
        for a in sorted(before - set(endpoints)):
            p = addrs.get(a)
            self.events.emit("endpoint_removed", pod=p.spec.name if p else None, address=a)
        self._endpoints, self._split = endpoints, split
        self.gateway.set_endpoints(list(endpoints), split)

    # --- autoscaler stand-in ----------------------------------------------------
    def _autoscale(self) -> None:
        """Scale to min_replicas after idle_s of "idle", as the policy defines idle."""
        a = self.autoscaler
        with self.lock:
            pods = [p for p in self.pods.values() if p.ready and not p.terminating]
            replicas = self.replicas
        if replicas <= a.min_replicas or not pods:
            self._idle_since = None
            return
        running = waiting = finished = 0.0
        for p in pods:
            m = scrape(p.spec.address)
            running += m.get("vllm:num_requests_running", 0)
            waiting += m.get("vllm:num_requests_waiting", 0)
            total = m.get("vllm:request_success_total", 0)
            finished += total - self._prev_finished.get(p.spec.name, total)
            self._prev_finished[p.spec.name] = total
        rate = finished / a.period_s
        if a.policy == "rate":
            idle = waiting == 0 and rate < a.rate_threshold_rps  # blind to long decodes
        else:
            idle = running == 0 and waiting == 0
        now = time.monotonic()
        if not idle:
            self._idle_since = None
            return
        self._idle_since = self._idle_since or now
        if now - self._idle_since >= a.idle_s:
            self._idle_since = None
            self.events.emit(
                "autoscaler_decision",
                policy=a.policy,
                running=running,
                waiting=waiting,
                rate_rps=rate,
                replicas_to=a.min_replicas,
            )
            self.scale(a.min_replicas, by=f"autoscaler ({a.policy})")


def _scale_down_order(pods: list[PodRunner]) -> list[PodRunner]:
    """Kubernetes' preference when removing pods: not ready first, then the lowest
    pod-deletion-cost, then the newest."""
    return sorted(pods, key=lambda p: (p.ready, p.deletion_cost, -p.created_at))


def scrape(address: str, timeout_s: float = 1.0) -> dict[str, float]:
    """A pod's /metrics, summed per metric name (labels dropped)."""
    try:
        text = http_get(f"http://{address}/metrics", timeout=timeout_s).text
    except httpx.HTTPError:
        return {}
    return parse_metrics(text)
