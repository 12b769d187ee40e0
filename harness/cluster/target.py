"""Targets: one interface over the embedded local target and a Kubernetes cluster.

A scenario never asks which target it runs on. Waiting lives here, so scenario
files read as steady state, act, observe, judge.
"""

from __future__ import annotations

import abc
import signal
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from harness.client import http_get
from harness.errors import RollcheckError
from harness.events import Event
from harness.waits import T, wait_until, watched

if TYPE_CHECKING:
    from harness.config.schema import RunConfig


@dataclass
class PodView:
    """A pod as every target reports it."""

    name: str
    version: str
    node: str | None
    address: str | None  # ip:port, once the pod has an address
    phase: str
    ready: bool
    terminating: bool
    restarts: int
    created_at: float
    image: str | None = None  # the engine container's image, where the target has images


class TargetError(RollcheckError, RuntimeError):
    """The target cannot do what was asked: one clear line."""


class CannotRun(TargetError):
    """The target cannot run this scenario, found before acting: it is SKIPPED with the
    reason (never a traceback, never a pass)."""


class EvictionRefused(TargetError):
    """The PodDisruptionBudget does not allow this eviction now (HTTP 429)."""


def strategy_changes(
    max_surge: str | None = None,
    max_unavailable: str | None = None,
    min_ready_s: float | None = None,
) -> dict:
    """The rollout strategy fields a rollout sets (the ones given): what every target
    applies and records on the rollout action."""
    given = {"max_surge": max_surge, "max_unavailable": max_unavailable, "min_ready_s": min_ready_s}
    return {k: v for k, v in given.items() if v is not None}


def evict_retrying(attempt: Callable[[], None], retry_deadline_s: float, interval_s: float) -> None:
    """Evict as `kubectl drain` does, on both targets: a refusal (the PDB's 429, raised by
    `attempt` as EvictionRefused) is retried every interval_s until retry_deadline_s,
    and the last refusal is raised then."""
    deadline = time.monotonic() + retry_deadline_s
    with watched("an eviction", retry_deadline_s):
        while True:
            try:
                return attempt()
            except EvictionRefused:  # the last refusal is raised at the deadline
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
            time.sleep(min(interval_s, left))


def canary_rollout(version: str, engine: dict | None) -> dict:
    """The `rollout` action a canary records, on every target: one new pod, nothing taken
    down (surge 1, unavailable 0), held there until judged."""
    return {
        "to_version": version,
        "engine": engine or {},
        "max_surge": "1",
        "max_unavailable": "0",
        "canary": True,
    }


class Target(abc.ABC):
    """Everything a scenario, the plugin or a report asks of a target is declared here:
    what they call is never looked up by hasattr."""

    name: str
    run_dir: Path
    cfg: RunConfig
    # what close() put back (a Kubernetes target restores what it changed): one line each
    restored: Sequence[str] = ()
    # the preflight rules' findings on the live Deployment (harness.lint), where there is one
    lint_findings: Sequence = ()

    # --- lifecycle -----------------------------------------------------------
    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def close(self) -> None:
        """Stop what the target started and put back what it changed."""

    @property
    @abc.abstractmethod
    def gateway_url(self) -> str: ...

    # --- observation ---------------------------------------------------------
    @abc.abstractmethod
    def pods(self) -> list[PodView]: ...

    @abc.abstractmethod
    def events(self) -> list[Event]: ...

    @abc.abstractmethod
    def pod_metrics(self, name: str) -> dict[str, float]: ...

    @abc.abstractmethod
    def pod_health(self, name: str) -> int | None:
        """The status of the pod's /health, or None when it does not answer."""

    def prestop_s(self, name: str) -> float:
        """How long the pod's preStop holds its SIGTERM back (0: none, or not known)."""
        return 0.0

    def pod_probes(self) -> dict:
        """The startup and liveness probes the pods run ({period_s, failure_threshold} or
        None each): here, the config's; a Kubernetes target reads the live Deployment's."""
        pod = self.cfg.pod

        def window(p):
            if p is None:
                return None
            return {"period_s": p.period_s, "failure_threshold": p.failure_threshold}

        return {"startup": window(pod.startup_probe), "liveness": window(pod.liveness_probe)}

    def relint(self, min_startup_s: float) -> None:
        """The preflight rules again, with a start-up time observed in the run, where the
        target has a live Deployment to lint (none here)."""
        return None

    @abc.abstractmethod
    def gateway_logs(self) -> tuple[Path | None, Path | None]:
        """Paths of the gateway's access and error logs (None when not available)."""

    def engine_logs(self) -> dict[str, Path]:
        """Each pod's engine log the run kept (pod name -> file), for the engines' own
        request lines (harness.engine_logs); none by default."""
        return {}

    @abc.abstractmethod
    def action(self, kind: str, **detail) -> Event:
        """Record a scenario action on the event timeline."""

    # --- actions -------------------------------------------------------------
    @abc.abstractmethod
    def rollout(
        self,
        version: str,
        engine: dict | None = None,
        max_surge: str | None = None,
        max_unavailable: str | None = None,
        min_ready_s: float | None = None,
    ) -> None: ...

    @abc.abstractmethod
    def rollout_done(self) -> bool: ...

    # A canary is one replica until judged (canary_rollout: how it is recorded): the
    # rollout starts (surge 1, nothing taken down) and holds at its first candidate pod (on
    # Kubernetes a paused Deployment whose minReadySeconds keeps the controller from moving
    # on before the pause lands), then goes on to every replica (promote) or gives the
    # baseline's template back (rollback).
    @abc.abstractmethod
    def start_canary(self, version: str, engine: dict | None = None) -> None: ...

    @abc.abstractmethod
    def promote_canary(self) -> None: ...

    @abc.abstractmethod
    def rollback_canary(self) -> None: ...

    @abc.abstractmethod
    def evict_pod(self, name: str, retry_deadline_s: float = 0.0) -> None: ...

    @abc.abstractmethod
    def drain_node(self, node: str, retry_deadline_s: float = 30.0) -> list[str]: ...

    @abc.abstractmethod
    def uncordon(self, node: str) -> None: ...

    @abc.abstractmethod
    def scale(self, replicas: int) -> None: ...

    def check_own_pod(self, name: str) -> PodView | None:
        """TargetError unless `name` is a pod of the workload this target acts on (every
        pod the local target runs is); the pod, where the target checks it."""
        return None

    def node_drain_blocker(self) -> str | None:
        """Why a node drain cannot be done here (a setting, a permission), or None."""
        return None

    def check_node_drain(self, node: str) -> None:
        """TargetError, before anything is cordoned, when a node drain may not be done."""
        blocker = self.node_drain_blocker()
        if blocker:
            raise TargetError(f"cannot drain node {node}: {blocker}")

    def preemption_blocker(self) -> str | None:
        """Why an engine pod cannot be preempted here, or None. Preemption is the
        scheduler's: a target without one (the local target) cannot."""
        return (
            f"the {self.name} target has no scheduler: preemption is kube-scheduler's, run "
            "it with --target kube (kube-local runs the real one)"
        )

    def preempt(self, name: str) -> None:
        """preemption's act: a pod of a higher priority that fits only where `name` runs."""
        raise CannotRun(self.preemption_blocker() or "preemption is not supported here")

    def node_loss_blocker(self) -> str | None:
        """Why a node cannot be stopped here, or None."""
        return (
            f"the {self.name} target runs its engines on this machine: a node's loss is "
            "kube-local's (its nodes' bridges cut off and processes frozen) or a cluster's"
        )

    def lose_node(self, node: str) -> None:
        """node_loss's act: `node` stops as a power loss would (no RST, its kubelet silent)."""
        raise CannotRun(self.node_loss_blocker() or "a node's loss is not supported here")

    def return_node(self, node: str, timeout_s: float = 60.0) -> None:
        """The lost node comes back (and is Ready again within timeout_s)."""
        return None

    def end_preemption(self) -> None:
        """The preemptor leaves (and its PriorityClass): the victim's replacement can run."""
        return None

    def scaler(self) -> str:
        """Who decides the replica count in the scale scenarios: "cluster" (the
        workload's own HPA or ScaledObject) or "harness" (rollcheck plays the scaler, the
        only way on a target with no scaler of its own)."""
        return "harness"

    def autoscaler_blocker(self, to_zero: bool = False) -> str | None:
        """Why the count cannot be handed to the workload's own scaler here (none targets
        it; with to_zero, none ever goes to zero), or None."""
        return None

    def workload_scalers(self) -> list[str]:
        """The scalers of the workload's own (kind/name), where the target has them."""
        return []

    def hold_count(self, replicas: int) -> None:
        """Before a scenario: where the workload has a scaler of its own, set the count to
        `replicas` and hold it there (the scale scenarios hand it back to the scaler)."""
        return None

    def hand_back(self, as_act: bool = True, hold_scale_in: bool = False) -> None:
        """Give the replica count back to the workload's own scaler (kube.scaler=cluster);
        as_act: this is the scenario's act (the disruption), not a preparation for it;
        hold_scale_in: the scaler may add replicas but not remove any until
        release_scale_in()."""
        raise TargetError(f"{self.name}: there is no scaler of the workload's own to hand to")

    def release_scale_in(self) -> None:
        """The scaler may remove replicas again (after hand_back(hold_scale_in=True))."""
        return None

    def scaler_active_since(self, t: float) -> bool | None:
        """Whether the workload's scaler has read its triggers as active since t, or None
        when the target cannot tell (no scaler that says so)."""
        return None

    def desired_replicas(self) -> int | None:
        """The replica count the workload asks for now (its scaler's decision), if known."""
        return None

    def why_removed(self, name: str) -> str:
        """Why the workload's controller chose this pod to remove, as far as it is known."""
        return "not known on this target"

    def free_gpus(self) -> tuple[int, int] | None:
        """(GPUs free on schedulable nodes, GPUs one pod needs), or None when pods do not
        hold GPUs here (or the count cannot be known)."""
        return None

    def candidate_image(self, version: str) -> str | None:
        """The image a rollout to `version` sets, where the target has images."""
        return None

    def candidate_problem(self, version: str, engine: dict, key: str) -> str | None:
        """Why a rollout to `version` (with these engine settings) would not meet a new
        candidate at all, naming the config keys to set; None when it would. `key` is the
        setting the version came from (next_version, canary.version)."""
        if version == self.cfg.version:
            return (
                f"{key} is {version!r}, the baseline's version (version): the scenario would "
                f"meet the baseline's own build, not a candidate; set {key} to the candidate's "
                "version"
            )
        return None

    def auth_headers(self) -> dict[str, str]:
        """The load's API key (load.api_key_env) for the harness's own calls."""
        from loadgen.settings import auth_headers

        try:
            return auth_headers(self.cfg.load.api_key_env)
        except ValueError as exc:
            raise TargetError(str(exc)) from None

    def pod_endpoint(self, name: str) -> tuple[str, dict]:
        """A base URL that reaches one pod's engine directly (not through the gateway),
        and the httpx client settings it needs."""
        pod = next((p for p in self.pods() if p.name == name), None)
        if pod is None or not pod.address:
            raise TargetError(f"pod {name!r} has no address yet")
        return f"http://{pod.address}", {}

    def scale_down(self, pod: str) -> None:
        """Remove one replica, and make it `pod` (pod-deletion-cost, as a scaler can)."""
        raise TargetError(f"{self.name}: cannot choose the replica a scale-down removes")

    @abc.abstractmethod
    def kill_pod(self, name: str, sig: int = signal.SIGKILL) -> None: ...

    def memory_limit_mb(self, name: str) -> float | None:
        """The engine container's memory limit in MiB, or None (no limit)."""
        return None

    def exhaust_memory(
        self, name: str, context_tokens: int, model: str | None, retry: int = 0
    ) -> None:
        """oom_kill's act: one request to the pod's engine itself (not the gateway) with
        a context its container's memory limit cannot hold, from a thread of its own (the
        kill cuts its answer, which nobody waits for); the kernel's OOM killer, or the
        local kubelet at the limit, ends the engine. retry: the same request sent again
        (its nth time), as a client retries one that got no answer."""
        import threading

        from harness.calibration import warm_up

        limit = self.memory_limit_mb(name)
        if limit is None:
            raise CannotRun(
                f"the engine container of {name} has no memory limit: no request can cross "
                "it (oom_kill judges an engine under resources.limits.memory; on the local "
                "target, pod.memory_limit_mb)"
            )
        url, settings = self.pod_endpoint(name)
        key = None if "headers" in settings else self.auth_headers()
        again = {"retry": retry} if retry else {}  # the request's nth retry
        self.action("oom_request", pod=name, context_tokens=context_tokens, limit_mb=limit, **again)

        def send() -> None:
            try:
                (r,) = warm_up(url, model, 1, settings, key, context_tokens)
            except Exception:  # the answer is the kill's to cut: its end says nothing
                return
            # how the request ended: a refusal (a context above max_model_len) is no kill
            self.action("oom_answer", pod=name, outcome=r.outcome, status=r.status, **again)

        threading.Thread(target=send, name="oom-request", daemon=True).start()

    # --- LoRA adapters (adapter_rollout) --------------------------------------------
    def adapter_blocker(self) -> str | None:
        """Why LoRA adapters cannot be loaded into this target's engines at run time."""
        return (
            f"the {self.name} target does not load LoRA adapters into its engines yet: "
            "adapter_rollout runs on the local target with the simulator"
        )

    def load_adapter(self, pod: str, name: str, path: str, inplace: bool = False) -> None:
        """Load an adapter into one pod's engine, or reload it in place (vLLM's
        /v1/load_lora_adapter, the pod asked directly); TargetError with its answer."""
        body = {"lora_name": name, "lora_path": path, "load_inplace": inplace}
        self.action("adapter_load", pod=pod, adapter=name, path=path, inplace=inplace)
        self._adapter_call(pod, "load", body)
        self.__dict__.setdefault("_adapters_loaded", set()).add((pod, name))

    def unload_adapter(self, pod: str, name: str) -> None:
        """Unload an adapter by name from one pod's engine (/v1/unload_lora_adapter)."""
        self.action("adapter_unload", pod=pod, adapter=name)
        self._adapter_call(pod, "unload", {"lora_name": name})
        self.__dict__.setdefault("_adapters_loaded", set()).discard((pod, name))

    def unload_run_adapters(self) -> list[str]:
        """Unload what the run loaded and left (the new version, after a rollout; both,
        after an interrupted one): an engine the run did not start keeps nothing of it. A
        pod gone, or an adapter already gone, is passed over."""
        done = []
        for pod, name in sorted(self.__dict__.get("_adapters_loaded", ())):
            try:
                self._adapter_call(pod, "unload", {"lora_name": name})
                done.append(f"adapter {name} unloaded from {pod}")
            except TargetError:
                pass
        self.__dict__["_adapters_loaded"] = set()
        return done

    def _adapter_call(self, pod: str, verb: str, body: dict) -> None:
        from harness.client import http_post

        url, settings = self.pod_endpoint(pod)
        kw = dict(settings)  # a pod reached through the API server: its TLS and headers
        kw.setdefault("headers", self.auth_headers())
        try:
            r = http_post(f"{url}/v1/{verb}_lora_adapter", timeout=30, json=body, **kw)
        except httpx.HTTPError as exc:
            raise TargetError(f"{verb} of adapter {body['lora_name']} on {pod}: {exc}") from None
        if r.status_code != 200:
            said = " ".join(r.text.split())[:200]
            raise TargetError(
                f"{pod}'s engine refused the {verb} of adapter {body['lora_name']} "
                f"(HTTP {r.status_code}: {said})"
                + (
                    "; it serves no adapter endpoints: start it with --enable-lora and "
                    "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"
                    if r.status_code == 404 and verb == "load"
                    else ""
                )
            )

    # --- traffic weights at the gateway (weighted_canary) ------------------------------
    def weight_blocker(self) -> str | None:
        """Why this target cannot split its traffic by weight between two versions."""
        return (
            f"the {self.name} target does not split traffic by weight yet (a Gateway API "
            "HTTPRoute's backendRefs weights): weighted_canary runs on the local target"
        )

    def start_candidate(
        self, version: str, engine: dict | None = None, stable_selects_candidate: bool = False
    ) -> None:
        """One replica of `version`, given no traffic (weight 0) until set_weight; the
        rollout is held there, as start_canary holds it. stable_selects_candidate: the
        stable backend selects the candidate's pods too (a misconfiguration)."""
        raise CannotRun(self.weight_blocker() or "no weights here")

    def scale_candidate(self, replicas: int) -> None:
        """The candidate's replicas (the held rollout's new pods)."""
        raise CannotRun(self.weight_blocker() or "no weights here")

    def set_weight(self, percent: float) -> None:
        """The share of the requests the gateway sends to the candidate from now on."""
        raise CannotRun(self.weight_blocker() or "no weights here")

    def mirror_blocker(self) -> str | None:
        """Why this target's gateway cannot mirror requests to a candidate."""
        return (
            f"the {self.name} target does not mirror requests yet (a Gateway API HTTPRoute's "
            "RequestMirror filter): shadow runs on the local target"
        )

    def set_mirror(self, percent: float) -> None:
        """The share of the requests the gateway copies to the candidate from now on, its
        answers discarded (0: none)."""
        raise CannotRun(self.mirror_blocker() or "no mirror here")

    def mirror_log(self) -> Path | None:
        """The gateway's log of the mirrored requests, one line each (None: none kept)."""
        return None

    def end_split(self) -> None:
        """The gateway routes to the Service as one again (after a promotion or a
        rollback has run its course): the weights as they were."""
        return None

    # --- prefill/decode disaggregation (pd_rollout) --------------------------------------
    # The deployment's two roles: "decode", the Deployment the gateway routes to (pods(),
    # rollout(), every other scenario's), and "prefill", the Deployment behind the prefill
    # Service its decode pods' routing sidecars call (harness/sim/pd.py).
    def pd_blocker(self) -> str | None:
        """Why this target does not run a prefill/decode deployment."""
        return f"the {self.name} target does not run a prefill/decode deployment"

    def prefill_pods(self) -> list[PodView]:
        """The prefill role's pods."""
        raise CannotRun(self.pd_blocker() or "no P/D here")

    def pd_rollout(self, roles: tuple[str, ...], version: str, engine: dict | None = None) -> Event:
        """Roll each of `roles` (prefill, decode) to `version` (its engine settings changed
        by `engine`) at once, each Deployment with its own strategy; the act's event."""
        raise CannotRun(self.pd_blocker() or "no P/D here")

    def pd_rollout_done(self, role: str) -> bool:
        """The role's rollout has run its course."""
        raise CannotRun(self.pd_blocker() or "no P/D here")

    def pd_scale(self, role: str, replicas: int) -> Event:
        """Scale one role's Deployment; the act's event."""
        raise CannotRun(self.pd_blocker() or "no P/D here")

    def prefill_service_log(self) -> Path | None:
        """The prefill Service's access log, one line per prefill (the request id and the
        prefill pod it reached), where the target keeps one."""
        return None

    def prefill_events(self) -> list[Event]:
        """The prefill role's pods' events (pod_created with each one's address,
        pod_removed): who held an address when (harness.timeline.address_spans)."""
        return []

    def pd_routes(self) -> dict[str, tuple[str, str]]:
        """The decode pods' routes so far: request id -> (the prefill engine's host:port
        whose KV its decode read, and what became of the KV: read, recomputed or failed),
        from the decode pods' logs."""
        from harness.pd import routes_in_log

        found: dict[str, tuple[str, str]] = {}
        for path in self.engine_logs().values():
            found |= routes_in_log(path)
        return found

    @abc.abstractmethod
    def delete_pod(self, name: str, grace_s: float | None = None) -> None: ...

    @abc.abstractmethod
    def set_autoscaler(self, policy: str) -> None: ...

    # --- waiting (shared) ----------------------------------------------------
    def wait_for(
        self,
        cond: Callable[[], T],
        timeout_s: float,
        what: str,
        poll_s: float = 0.05,
        stall_s: float | None = None,
    ) -> T:
        """Until cond() gives something truthy, at most timeout_s, and that value;
        TargetError at the deadline. stall_s: for as long as the pods' start-up progresses
        (startup_progress), failing after stall_s without progress (a target that cannot
        tell progress waits the whole timeout_s)."""
        if stall_s and self.startup_progress() is not None:
            return wait_until(
                cond,
                stall_s,
                what,
                interval_s=poll_s,
                error=TargetError,
                progress=self.startup_progress,
                ceiling_s=timeout_s,
            )
        return wait_until(cond, timeout_s, what, interval_s=poll_s, error=TargetError)

    def ready_pods(self) -> list:
        return [p for p in self.pods() if p.ready and not p.terminating]

    def startup_progress(self) -> object:
        """Something that changes while the target's pods are getting on with starting
        (the local target: the size of its starting engines' logs), or None when the
        target cannot tell; waits with a stall bound follow it."""
        return None

    def wait_settled(
        self,
        replicas: int,
        timeout_s: float = 60.0,
        stall_s: float | None = None,
        ignoring: tuple[str, ...] = (),
    ) -> None:
        """Exactly `replicas` pods, all ready, none terminating, the rollout done.
        stall_s: wait while the pods' start-up progresses (startup_progress), failing
        after stall_s without progress, up to timeout_s in all. ignoring: pods left out
        once terminating (a lost node's: no kubelet is there to end them)."""

        def settled() -> bool:
            pods = [p for p in self.pods() if not (p.terminating and p.name in ignoring)]
            return (
                self.rollout_done()
                and len(pods) == replicas
                and all(p.ready and not p.terminating for p in pods)
            )

        self.wait_for(settled, timeout_s, f"{replicas} settled pods", stall_s=stall_s)
        if replicas:
            self.wait_gateway_serving(timeout_s)

    def wait_gateway_serving(self, timeout_s: float = 30.0) -> None:
        """The gateway routes to a ready engine (it learns of endpoints late)."""

        headers = self.auth_headers()

        def serving() -> bool:
            try:
                r = http_get(self.gateway_url + "/v1/models", headers=headers, timeout=2)
                return r.status_code == 200
            except httpx.HTTPError:
                return False

        self.wait_for(serving, timeout_s, "the gateway to route to a ready pod", 0.1)

    def wait_pod_gone(self, name: str, timeout_s: float = 60.0) -> None:
        self.wait_for(
            lambda: all(p.name != name for p in self.pods()), timeout_s, f"pod {name} to be gone"
        )

    def in_flight(self, name: str) -> int:
        return int(self.pod_metrics(name).get("vllm:num_requests_running", 0))

    def warm_engines(
        self, requests: int, model: str | None, prompt_tokens: int | None = None
    ) -> None:
        """`requests` short answers from each ready pod to prompts of about prompt_tokens
        (the load's longest), sent to it directly (not through the gateway), the pods
        side by side: a real engine compiles on its first requests, and a longer
        prompt's first prefill is slow again. Each pod's first tokens go on the timeline
        as a `warmed` event."""
        from harness.calibration import warm_up

        def warm(pod: PodView) -> None:
            url, settings = self.pod_endpoint(pod.name)
            # the load's API key, unless the way in has credentials of its own (the API
            # server's pods proxy: its token is the Authorization header)
            key = None if "headers" in settings else self.auth_headers()
            records = warm_up(url, model, requests, settings, key, prompt_tokens)
            ttfts = [None if r.ttft_s is None else round(r.ttft_s, 3) for r in records]
            counted = [(r.usage or {}).get("prompt_tokens") for r in records]
            self.action(
                "warmed",
                pod=pod.name,
                ttft_s=ttfts,
                outcomes=[r.outcome for r in records],
                prompt_tokens=counted,  # as the engine counted them
            )

        pods = self.ready_pods()
        with ThreadPoolExecutor(max_workers=max(1, len(pods))) as pool:
            list(pool.map(warm, pods))

    def busiest_pod(self, min_in_flight: int = 1, timeout_s: float = 30.0, prefer=None, among=None):
        """The ready pod with the most running sequences, once it has min_in_flight
        (prefer: only among the pods it accepts; among: the pods to choose from, by
        default the Deployment's, e.g. prefill_pods)."""

        def found() -> PodView | None:
            ready = [p for p in (among or self.pods)() if p.ready and not p.terminating]
            pods = [p for p in ready if prefer is None or prefer(p)]
            ranked = sorted(pods, key=lambda p: -self.in_flight(p.name))
            if ranked and self.in_flight(ranked[0].name) >= min_in_flight:
                return ranked[0]
            return None

        return self.wait_for(found, timeout_s, f"a pod with {min_in_flight} streams in flight", 0.1)


# What a dry run (harness.dryrun) passes through to the real target: the target's start
# and close (nothing is changed, so there is nothing to put back), reads of the world, and
# the checks that refuse before acting. WAITS poll the target's own reads through
# wait_for, which a dry run answers at once after its first planned action. Every other
# public method acts: a dry run plans it, or SKIPs the scenario where it has no plan for
# it yet, so a new method can never act in a dry run by default (tests/test_dryrun.py).
READS = frozenset(
    {
        "start",
        "close",
        "gateway_url",
        "lint_findings",
        "adapter_blocker",
        "auth_headers",
        "autoscaler_blocker",
        "candidate_image",
        "candidate_problem",
        "check_node_drain",
        "check_own_pod",
        "desired_replicas",
        "engine_logs",
        "events",
        "free_gpus",
        "gateway_logs",
        "in_flight",
        "memory_limit_mb",
        "mirror_blocker",
        "mirror_log",
        "node_drain_blocker",
        "node_loss_blocker",
        "pd_blocker",
        "pd_rollout_done",
        "pd_routes",
        "pod_endpoint",
        "pod_health",
        "pod_metrics",
        "pod_probes",
        "pods",
        "preemption_blocker",
        "prefill_events",
        "prefill_pods",
        "prefill_service_log",
        "prestop_s",
        "ready_pods",
        "relint",
        "rollout_done",
        "scaler",
        "scaler_active_since",
        "startup_progress",
        "weight_blocker",
        "why_removed",
        "workload_scalers",
    }
)
WAITS = frozenset(
    {"wait_for", "wait_settled", "wait_pod_gone", "wait_gateway_serving", "busiest_pod"}
)


def acting_methods() -> list[str]:
    """The Target's public methods that change something (neither READS nor WAITS)."""
    return sorted(
        name
        for name in dir(Target)
        if not name.startswith("_")
        and name not in READS | WAITS
        and callable(getattr(Target, name))
    )
