"""Scenario: steady state -> act -> observe -> judge, with the waiting done here.

A scenario file calls these steps and the target's actions; this module owns
the load, the polling, the join of records with gateway logs and cluster
events, the checks and the run folder.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

from harness import checks as C
from harness import client_delay
from harness import verdict as V
from harness.cluster.target import EvictionRefused, Target, TargetError
from harness.config.schema import RunConfig
from harness.engines.kinds import kind_of
from harness.events import Event
from harness.files import write_atomic
from harness.gathering import join, wait_logged
from harness.load import LoadError, LoadRun
from harness.load_status import LoadStatus
from harness.progress import Progress
from harness.scaler_handover import ScalerHandover
from harness.streams import Thresholds, write_jsonl
from harness.timeline import breaking_event, disruption_time, steady_state_time
from harness.waits import T, hold, watched
from harness.witness import Witnesses

Check = Callable[[V.RunData], V.CheckResult]
# a drain's victim holds a stream expected to outlast its preStop by this factor and 0.5 s
# (the estimate is the stream's own pace so far, and the eviction takes time to land),
# waited for at most PREFER_WAIT_S (answers shorter than the preStop never will)
PRESTOP_MARGIN = 1.2
PREFER_WAIT_S = 10.0


def write_unjudged(
    run_dir: Path, kind: str, name: str, target: str | None, reason: str, verdict="skipped"
) -> dict:
    """The summary of a run that ended without judging: SKIPPED before acting, or
    INCONCLUSIVE when the session was interrupted; why, for the index."""
    summary = {"scenario": kind, "name": name} | ({"target": target} if target else {})
    summary |= {"verdict": verdict, "reason": reason, "requests": 0, "outcomes": {}}
    summary["checks"] = []
    write_atomic(run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary


class ScenarioFailed(AssertionError):
    """The verdict is fail or inconclusive; the message is the short, readable account."""


class DryRun(Exception):
    """A dry run ends before judging: there is nothing to judge."""


class ScenarioSkipped(Exception):
    """The target cannot run this scenario (found before acting): SKIPPED, with why."""


class Scenario:
    def __init__(
        self,
        name: str,
        kind: str,
        cfg: RunConfig,
        target: Target,
        run_dir: Path,
        progress: Progress | None = None,
        load_factory: Callable[..., LoadRun] = LoadRun,
    ):
        """load_factory: what sends the load (LoadRun; a dry run's sends nothing), called
        as LoadRun(gateway_url, run_dir, settings, thresholds)."""
        self.name, self.kind, self.cfg, self.target = name, kind, cfg, target
        self.load_factory = load_factory
        self.run_dir = Path(run_dir)
        # phase lines and the status while waiting (the plugin's, started with the target)
        self.progress = progress or Progress(name, cfg.ui.progress_every_s)
        self.progress.target = target
        self.load: LoadRun | None = None
        # load.workers: auto, as the session sized it for its engine (else LoadRun sizes it)
        self.load_workers: int | None = None
        self.victims: list[str] = []
        self.victim_in_flight: dict[str, int] = {}
        self.t_recovered: float | None = None
        self.t_start: float | None = None
        self.t_step: float | None = None
        self._restarts_at_kill = 0
        self.summary: dict | None = None
        self.load_status: LoadStatus | None = None  # the load's own account of its end (gather)
        self.extras: dict = {}  # scenario-specific sections of summary.json (canary)
        # the engines' own counts through the run, and a pod's /health where asked
        self.witnesses = Witnesses(target, cfg.scenario.engine_poll_s)
        # the replica count handed to the workload's own scaler (kube.scaler=cluster)
        self.scaler = ScalerHandover(
            target,
            cfg.scenario,
            let_pass=self.let_pass,
            wait_for=self.wait_for,
            stop=self.inconclusive,
            skip=self.skip,
            in_flight=lambda: self.load.counts()["in_flight"],
        )

    @property
    def thresholds(self) -> Thresholds:
        slo = self.cfg.slo
        return Thresholds(slo.stall_timeout_s, slo.ttft_s, slo.itl_s, slo.max_event_bytes)

    # --- steady state --------------------------------------------------------------
    def steady_state(self, in_flight: int | None = None, **load_overrides) -> None:
        """Start the load, let it warm up, wait for streams in flight."""
        settings = dataclasses.replace(self.cfg.load, **load_overrides)
        if settings.workers == "auto" and self.load_workers is not None:
            settings = dataclasses.replace(settings, workers=self.load_workers)
        if self.cfg.scenario.warm_requests:
            longest = max(share.tokens for share in settings.prompt_tokens)
            self.target.warm_engines(self.cfg.scenario.warm_requests, settings.model, longest)
        self.load = self.load_factory(
            self.target.gateway_url, self.run_dir, settings, self.thresholds
        )
        self.load.preflight()
        self.witnesses.start_engine_counts()
        self.t_start = time.time()
        self.load.start()
        self.progress.load = self.load
        self.progress.phase(f"load started: {describe_load(settings)}")
        self.let_pass(self.cfg.scenario.warmup_s, "the warm-up")
        n = self.cfg.scenario.in_flight if in_flight is None else in_flight
        if n:
            try:
                self.load.wait_until_in_flight(n, timeout_s=self.cfg.scenario.steady_state_s)
            except LoadError as exc:
                self.inconclusive(f"steady state not reached: {exc}")
        streams = self.load.counts()["in_flight"]
        self.target.action("steady_state", in_flight=streams)
        self.progress.phase(f"steady state: {streams} streams in flight")

    def close(self) -> None:
        """End what the scenario started, however it ended (a verdict, an error, SIGTERM):
        the /health poll and the engine witness are stopped and joined (a thread left
        running at interpreter exit aborted a SIGTERMed run with status 134), the load
        stopped."""
        self.witnesses.close()
        if self.load is not None:
            self.load.close()

    def prepare_replicas(self, n: int) -> None:
        """Before the steady state: bring the deployment to n ready replicas."""
        self.target.scale(n)
        self.wait_recovered(replicas=n)
        self.t_recovered = None

    def busiest_pod(self, min_in_flight: int | None = None, past_prestop: bool = False):
        """The ready pod with the most streams in flight by its engine's own metrics: the
        one to disturb. If no pod reaches scenario.in_flight in time, the run is
        inconclusive: there would be nothing in flight to judge.

        past_prestop (a drain's victim): where the gateway names each stream's pod (as
        rollcheck's nginx does), a pod also holding a stream that should, at its pace so
        far, still be streaming when the pod's preStop has run, so that one is in flight
        at its SIGTERM. (Chosen by metrics alone, the victim's streams had all ended during
        its preStop in 4 of 30 default drains: nothing to judge.) If no such moment comes
        within PREFER_WAIT_S, the busiest pod, and the checks judge what is found."""
        n = self.cfg.scenario.in_flight if min_in_flight is None else min_in_flight
        timeout = self.cfg.scenario.steady_state_s
        load = self.load
        if past_prestop and load is not None and load.outlasting(0.0) is not None:

            def outlasts_prestop(pod) -> bool:
                cover = self.target.prestop_s(pod.name) * PRESTOP_MARGIN + 0.5
                return pod.address in (load.outlasting(time.time() + cover) or ())

            wait = min(timeout, PREFER_WAIT_S)
            try:
                return self.target.busiest_pod(n, timeout_s=wait, prefer=outlasts_prestop)
            except TargetError:
                timeout = max(1.0, timeout - wait)  # no such moment came: the busiest pod
        try:
            return self.target.busiest_pod(n, timeout_s=timeout)
        except TargetError as exc:
            self.inconclusive(
                f"steady state not reached: no pod's engine metrics showed {n} streams running "
                f"({exc})"
            )

    def disturb(self, *pods: str) -> None:
        """Name the pods the disruption is aimed at, and read how many streams each is
        running by its engine's metrics (the evidence when streams cannot be traced)."""
        self.victims = list(pods)
        self.victim_in_flight = {p: self.target.in_flight(p) for p in pods}
        running = ", ".join(f"{n} on {p}" for p, n in self.victim_in_flight.items())
        self.progress.phase(f"victim chosen: streams running {running} (the engine's gauge)")

    def kill(self, pod: str, by: str = "signal", retry: int = 0) -> Event | None:
        """Kill the pod's engine, and wait until the target shows it took effect: the
        engine exited (the kubelet restarts it), was killed by its liveness probe (a
        frozen one), or the pod was removed. by: signal (scenario.kill_signal, pod_kill)
        or memory (a request whose context the container's memory limit cannot hold,
        oom_kill: the kernel kills it). Not seen within scenario.recovery_s, the run
        stops there (INCONCLUSIVE, or FAIL if a stream broke). retry: the same act again
        (its nth time) on the engine that came back, as a client retries a request that
        got no answer: its effect is not required, and None when the request was
        answered instead (refused, or served)."""
        before = next((p for p in self.target.pods() if p.name == pod), None)
        self._restarts_at_kill = before.restarts if before is not None else 0
        t_kill = time.time()
        if by == "memory":
            self.target.exhaust_memory(
                pod, self.cfg.scenario.oom_context_tokens, self.cfg.load.model, retry=retry
            )
        else:
            self.target.kill_pod(pod, self.kill_signal)
        if retry:
            return self._retry_ended(pod, t_kill, retry)

        how = (
            f"a request of {self.cfg.scenario.oom_context_tokens} tokens of context"
            if by == "memory"
            else self.cfg.scenario.kill_signal
        )
        self.confirm(
            f"the kill of {pod} ({how})",
            V.DEAD_EVIDENCE,
            [pod],
            since=t_kill,
            seen_as="kill_seen",
            none="the target showed no exit, restart or removal of its engine",
        )

    def _retry_ended(self, pod: str, since: float, retry: int) -> Event | None:
        """The retried act's end: the engine seen dead (the evidence), or the request
        answered, refused or served whole (None), for at most scenario.recovery_s (None).
        A cut answer is not the end: the exit shows on a cluster about a second later."""

        def ended() -> Event | None:
            for e in self.target.events():
                if e.pod != pod or e.t < since:
                    continue
                if e.kind in V.DEAD_EVIDENCE:
                    return e
                if (
                    e.kind == "action"
                    and e.detail.get("action") == "oom_answer"
                    and e.detail.get("retry") == retry
                    and C.answered_not_killed(e.detail)
                ):
                    return e
            return None

        seen = self.wait_for(ended, self.cfg.scenario.recovery_s, f"retry {retry}'s end")
        if seen is None or seen.kind == "action":
            return None
        self.target.action("retry_seen", pod=pod, evidence=seen.kind, t=seen.t, retry=retry)
        return seen

    def confirm(
        self,
        what: str,
        kinds: tuple[str, ...] | set[str],
        pods: list[str],
        since: float,
        seen_as: str = "act_seen",
        none: str = "",
    ) -> Event:
        """Wait until the target shows the act took effect on one of `pods` (an event of
        one of `kinds` from `since`, less a second of clock slack), for scenario.recovery_s;
        the evidence goes on the timeline as the action `seen_as`. Not seen, the run stops
        there (INCONCLUSIVE, or FAIL if a stream broke), saying `none`."""

        def seen() -> Event | None:
            return next(
                (
                    e
                    for e in self.target.events()
                    if e.pod in pods and e.kind in kinds and e.t >= since - 1.0
                ),
                None,
            )

        timeout = self.cfg.scenario.recovery_s
        evidence = self.wait_for(seen, timeout, f"{what} to show")
        if evidence is None:
            self.inconclusive(
                f"{what} was not seen to take effect within scenario.recovery_s "
                f"({timeout:g} s)" + (f": {none}" if none else ""),
                stage="disruption",
            )
        said = {
            k: evidence.detail[k] for k in ("code", "reason") if evidence.detail.get(k) is not None
        }
        self.target.action(seen_as, pod=evidence.pod, evidence=evidence.kind, t=evidence.t, **said)
        return evidence

    def evict(self, pod: str) -> None:
        """Evict through the PDB, retrying its refusals for scenario.eviction_retry_s."""
        self._gated(lambda: self.target.evict_pod(pod, self.cfg.scenario.eviction_retry_s))
        self._wait_seen_terminating([pod])

    def drain(self, node: str) -> None:
        """Cordon the node and evict its pods, each retried as evict() is."""
        self._gated(lambda: self.target.drain_node(node, self.cfg.scenario.eviction_retry_s))
        self._wait_seen_terminating(self.victims)

    def _wait_seen_terminating(self, pods: list[str]) -> None:
        """The target's view (a watch, on Kubernetes) lags the API: until it shows the
        evicted pods terminating, 'recovered' would be judged on the world before."""

        def seen() -> bool:
            live = {p.name: p for p in self.target.pods()}
            return all(name not in live or live[name].terminating for name in pods)

        self.wait_for(seen, self.cfg.scenario.steady_state_s, "the eviction to show")

    def _gated(self, act: Callable[[], object]) -> None:
        try:
            act()
        except EvictionRefused as exc:
            steady = self._steady_at()
            evicted = [e.pod for e in self.target.events() if e.kind == "evicted" and e.t >= steady]
            how = (
                f"the disruption was cut short after evicting {', '.join(evicted)}"
                if evicted
                else "the disruption could not be made"
            )
            self.inconclusive(
                f"{how}: the PodDisruptionBudget refused the eviction for "
                f"scenario.eviction_retry_s ({exc}); lower pdb.min_available or run more "
                "replicas",
                stage="disruption",
            )

    def _steady_at(self) -> float:
        """When the steady state was reached (the start of the load before it is)."""
        steady = steady_state_time(self.target.events())
        return steady if steady is not None else self.t_start or 0.0

    def wait_for_load_step(self) -> None:
        """Wait until the load shape's step happens, and mark it as the disruption."""
        step_at = self.load.wait_until_step(
            self.load.settings.step_at_s + self.cfg.scenario.steady_state_s
        )
        # stamped when Locust stepped, not when this thread noticed: the step's first
        # requests belong to the disruption
        self.t_step = step_at
        self.target.action("load_step", users=self.load.settings.step_users, t=step_at)
        steady = self._steady_at()
        if step_at < steady:
            self.inconclusive(
                f"the load step came {steady - step_at:.1f} s before the steady state was "
                f"reached (load.step_at_s {self.load.settings.step_at_s:g} s after the load "
                "started): its queueing is not the steady state's; raise load.step_at_s",
                stage="disruption",
            )

    @property
    def kill_signal(self) -> int:
        return signal.Signals[self.cfg.scenario.kill_signal]

    @property
    def step_users(self) -> int:
        return self.cfg.scenario.step_users

    def ask(self, pod, prompts: list, model: str | None = None) -> list:
        """Golden prompts to one pod directly (not through the gateway), so each answer is
        known to come from that pod's version (model: the model they name, an adapter;
        load.model by default). One at a time: the pod is also serving the load, whose
        TTFT the prompts must not push over its SLO (two at a time did, on kube-local's
        two replicas of four slots each)."""
        url, settings = self.target.pod_endpoint(pod.name)
        return self.load.ask(url, prompts, model or self.cfg.load.model, settings)

    def ask_each(self, pods: list, prompts: list, model: str | None = None) -> dict[str, list]:
        """ask() of every pod at once (each pod still one prompt at a time): pod name ->
        its answers."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, len(pods))) as pool:
            asked = list(pool.map(lambda pod: self.ask(pod, prompts, model), pods))
        return {pod.name: answers for pod, answers in zip(pods, asked, strict=True)}

    def candidate_engine(self, section) -> dict:
        """The candidate's engine settings (a canary section's `engine`). An engine upgrade
        on the same weights (mode same) keeps them: the simulator answers from its
        weights, not its version, so the local simulator's candidate is given the
        baseline's."""
        engine = dict(section.engine)
        local = self.target.name == "local"
        if section.mode == "same" and local and kind_of(self.cfg.engine).answers_from_weights:
            engine = {"weights": self.cfg.engine.weights or self.cfg.version} | engine
        return engine

    def require_candidate(self, version: str, engine: dict | None = None, key: str = "") -> None:
        """Before acting: a one-line config error when a rollout to `version` would not meet
        a new candidate (its version is the baseline's; on a cluster, an image and engine
        settings that change nothing in the pod template), naming the keys to set."""
        from harness.config import ConfigError

        problem = self.target.candidate_problem(version, engine or {}, key or "next_version")
        if problem:
            raise ConfigError(problem)

    def new_pods(self, version: str, pods: list) -> list:
        """Of these pods, the ones the act made: of the version, created after the rollout
        (a second's slack: Kubernetes stamps creation to the second), and running the
        candidate's image where the target has images."""
        since = disruption_time(self.target.events())
        if since is None:
            return []  # nothing was rolled out: no pod is the candidate's
        image = self.target.candidate_image(version)
        return [
            p
            for p in pods
            if p.version == version
            and p.created_at >= since - 1.0
            and (image is None or p.image is None or p.image == image)
        ]

    def wait_version_ready(self, version: str, timeout_s: float):
        """The first ready pod of a version (the canary replica)."""
        found = self.wait_for(
            lambda: self.new_pods(version, self.target.ready_pods()),
            timeout_s,
            f"a ready pod of version {version}",
        )
        if not found:
            self.inconclusive(
                f"no pod of version {version} made by the rollout became ready within "
                f"{timeout_s:g} s: nothing to compare (the startup scenario shows why a "
                "version does not start)",
                stage="disruption",
            )
        return found[0]

    # --- observe -------------------------------------------------------------------
    def wait_rollout(self) -> None:
        self.wait_for(self.target.rollout_done, self.cfg.scenario.recovery_s, "the rollout")

    def wait_recovered(self, replicas: int | None = None, ignoring: tuple[str, ...] = ()) -> None:
        """Wait (up to scenario.recovery_s) for the desired replicas, ready and served; with
        scenario.startup_stall_s, for as long as a replacement's start-up progresses (up
        to settle_s): a recovery later than recovery_s is then measured, not cut off.
        ignoring: pods not counted once terminating (a lost node's stay so until it is back)."""
        n = self.cfg.replicas if replicas is None else replicas
        self.progress.desired = n
        timing = self.cfg.scenario
        ceiling = max(timing.recovery_s, timing.settle_s) if timing.startup_stall_s else None
        try:
            self.target.wait_settled(
                n, ceiling or timing.recovery_s, stall_s=timing.startup_stall_s, ignoring=ignoring
            )
            self.t_recovered = time.time()
            self.target.action("recovered", replicas=n)
        except TargetError:
            self.t_recovered = None

    def wait_queues_clear(self) -> None:
        """Until no ready replica has a request waiting for a slot, as the replicas' own
        gauges say: a load step's queue on the old replica drains only as its answers end,
        however soon the new replicas serve. For at most what is left of scenario.recovery_s
        since the step; a queue still there then is for the judge to see."""
        since = self.t_step if self.t_step is not None else time.time()
        left = since + self.cfg.scenario.recovery_s - time.time()

        def clear() -> bool:
            pods = self.target.ready_pods()
            gauges = [self.target.pod_metrics(p.name) for p in pods]
            # a replica whose gauges did not answer is not known to be clear
            return bool(pods) and all(g.get("vllm:num_requests_waiting", 1) == 0 for g in gauges)

        if self.wait_for(clear, max(0.0, left), "the replicas' queues to clear"):
            self.target.action("queues_clear")

    def wait_replaced(self, pod: str) -> None:
        """pod_kill's recovery: the desired replicas ready, and a replacement of the killed
        pod (its restarted engine, or a pod created after the kill) ready and having
        served a complete stream, by its own engine's count. t_recovered is when the target
        showed that, within scenario.recovery_s of the kill; the view of the pods from
        before the kill cannot end it."""
        t_kill = disruption_time(self.target.events()) or time.time()
        self.wait_recovered()
        if self.t_recovered is None:
            return
        restarted = self._restarts_at_kill

        def replacement_served() -> str | None:
            for p in self.target.ready_pods():
                # (a second's slack: Kubernetes stamps creation to the second)
                fresh = p.restarts > restarted if p.name == pod else p.created_at > t_kill - 1.0
                if fresh and self.target.pod_metrics(p.name).get("vllm:request_success_total"):
                    return p.name
            return None

        left = t_kill + self.cfg.scenario.recovery_s - time.time()
        served = self.wait_for(replacement_served, max(0.0, left), "a replacement to serve")
        if served:
            self.t_recovered = time.time()
            self.target.action("replacement_served", pod=served)
        else:
            self.t_recovered = None
            self.target.action(
                "not_recovered",
                why=f"no replacement of {pod} served a complete stream within "
                f"scenario.recovery_s ({self.cfg.scenario.recovery_s:g} s) of the kill",
            )

    def wait_for(self, cond: Callable[[], T], timeout_s: float, what: str) -> T | None:
        """cond()'s first truthy value within timeout_s, or None when it never came."""
        try:
            return self.target.wait_for(cond, timeout_s, what, poll_s=0.1) or None
        except TargetError:
            return None

    def cool_down(self, seconds: float | None = None) -> None:
        """Keep the load running after recovery (scenario.cool_down_s by default)."""
        seconds = self.cfg.scenario.cool_down_s if seconds is None else seconds
        self.progress.phase(f"cool-down: {seconds:g} s more of load")
        self.let_pass(seconds, "the cool-down")

    def hold(self, seconds: float, what: str) -> None:
        """Keep the load running while `what` lasts (a phase line says so)."""
        self.progress.phase(f"{what}: {seconds:g} s")
        self.let_pass(seconds, what)

    def let_pass(self, seconds: float, what: str = "time to pass") -> None:
        """Let time pass with the load on (ended early if the load dies)."""
        if self.load is not None:
            self.load.hold(seconds, what)
        else:
            hold(seconds, what=what)

    # --- judge ---------------------------------------------------------------------
    def skip(self, reason: str):
        """End before acting, as SKIPPED: the run folder says why (the index lists it)."""
        self.summary = write_unjudged(self.run_dir, self.kind, self.name, self.target.name, reason)
        self.progress.phase(f"SKIPPED: {reason}")
        raise ScenarioSkipped(reason)

    def require(self, what: str, blocker: str | None) -> None:
        """Before acting: SKIPPED, saying why, when the target cannot do `what` (`blocker`:
        the reason a target's own *_blocker() gave, or None)."""
        if blocker:
            self.skip(f"cannot {what} here: {blocker}")

    def require_gpus(
        self,
        surge: int,
        what: str = "the rollout",
        pods: str = "surge pods",
        fix: str = "lower maxSurge or free GPUs",
    ) -> None:
        """Before acting: SKIPPED if the pods the act adds cannot get GPUs (they would stay
        Pending until the scenario timed out)."""
        if surge <= 0:
            return
        free = self.target.free_gpus()
        if free is None:
            return
        have, per_pod = free
        if surge * per_pod > have:
            self.skip(
                f"{what} needs {surge * per_pod} free GPUs ({surge} {pods} x {per_pod}) and "
                f"the schedulable nodes have {have}: {fix}"
            )

    def inconclusive(self, reason: str, stage: str = "steady_state"):
        """End the scenario early, with the reason: INCONCLUSIVE, unless a stream broke.
        No ending hides a broken stream: every stream sent so far is judged by the shared
        stream checks, and one broken makes the verdict FAIL, its account saying both what
        broke and why the scenario stopped (stage: "steady_state" before acting,
        "disruption" when the act went otherwise than planned). Raises ScenarioFailed."""
        if stage == "steady_state":
            expected = f"{self.cfg.scenario.in_flight} streams in flight"
        else:
            expected = "the disruption made as planned"
        stopped = V.inconclusive(stage, expected=expected, reason=reason)
        self.judge(lambda d: stopped, hold_slo=False)
        raise AssertionError("unreachable: judge raises for an inconclusive verdict")

    def judge(
        self,
        *checks: Check,
        expect_broken_on_victims: bool = False,
        hold_slo: bool = True,
        slo_required: tuple[str, ...] = ("during",),
        slo_phases: tuple[str, ...] = V.PHASES,
    ) -> dict:
        """Gather the run data, judge it with the shared stream checks and the scenario's
        own, write the run folder; raise ScenarioFailed with a short account unless the
        verdict is pass.

        expect_broken_on_victims: the disturbed pods' own streams may break (pod_kill);
        hold_slo: hold the run to its SLO budgets (not when it stopped early);
        slo_required: the phases that must hold requests for the SLO budgets to be
        evidence; slo_phases: the phases held to a budget."""
        data = self.gather(expect_broken_on_victims)
        shared = C.shared_checks(
            data,
            expect_broken_on_victims=expect_broken_on_victims,
            hold_slo=hold_slo,
            slo_required=slo_required,
            slo_phases=slo_phases,
        )
        results = V.judge(data, [*shared, *checks])
        self.summary = self.write(data, results)
        self.progress.phase(f"verdict {self.summary['verdict'].upper()}")
        if self.summary["verdict"] != "pass":
            said = (self.summary.get("calibration") or {}).get("warnings") or []
            raise ScenarioFailed(
                V.failure_message(
                    results,
                    data,
                    f"{self.kind} on {self.target.name}",
                    self.summary.get("report"),
                    said,
                    breaking_event,
                )
            )
        return self.summary

    def gather(self, expect_broken_on_victims: bool = False) -> V.RunData:
        """Stop the load and join the three views of each request (the load's records,
        the gateway's lines, the target's events) into the run data; records.jsonl is
        rewritten with each request's pod, version and gateway line."""
        self.witnesses.stop_health()
        still_open = self.load.counts()["in_flight"]
        self.progress.phase(
            f"stopping the load: {still_open} streams still open (they may finish within "
            f"load.stop_timeout_s, {self.load.settings.stop_timeout_s:g} s)"
        )
        with watched("the load to stop", self.load.settings.stop_timeout_s + 30):
            result = self.load.stop()
        self.load_status = result.status
        witness = self.witnesses.stop_engine_counts()
        t_end = time.time()
        self.progress.phase(f"judging {len(result.records)} records")
        wait_logged(
            self.target, result.records, self.wait_for, self.cfg.scenario.gateway_log_wait_s
        )
        joined = join(result.records, self.target, self.run_dir)
        records, events = joined.records, joined.events
        write_jsonl(records, self.run_dir / "records.jsonl")  # now with pod, version, gateway
        _, unavailable = self.cfg.strategy.resolve(self.cfg.replicas)
        slo = self.cfg.slo
        data = V.RunData(
            records=records,
            events=events,
            access=joined.access,
            errors=joined.errors,
            sent=result.sent,
            replicas=self.cfg.replicas,
            max_unavailable=unavailable,
            stall_timeout_s=slo.stall_timeout_s,
            ttft_slo_s=slo.ttft_s,
            itl_slo_s=slo.itl_s,
            slo_budgets={"ttft": slo.ttft_budget.as_dict(), "itl": slo.itl_budget.as_dict()},
            t_act=disruption_time(events),
            t_recovered=self.t_recovered,
            t_start=self.t_start,
            t_end=t_end,
            victims=self.victims,
            victim_in_flight=self.victim_in_flight,
            recovery_budget_s=self.cfg.scenario.recovery_s,
            lost_node_routing_s=self.cfg.scenario.lost_node_routing_s,
            scaler_idle_s=self.cfg.autoscaler.idle_s,
            gateway_logs=joined.access_log,
            engine_logs=joined.engine_logs,
            unparsed_gateway_lines=joined.unparsed.count,
            first_unparsed_line=joined.unparsed.first,
            expect_broken_on_victims=expect_broken_on_victims,
            outcome_total=result.outcome_total,
            load_problems=list(result.problems),
        )
        if witness is not None:
            data.engine_counts = witness.as_dict(data.t_act)
        windows = client_delay.read(self.run_dir)
        data.client_delay = client_delay.by_phase(windows, data.phases.at) or None
        data.client_delay_share = slo.client_delay_share
        return data

    def write(self, data: V.RunData, results: list) -> dict:
        """Write the run folder (records, report, summary) and return the summary."""
        from harness.report import write_run

        self.progress.t_end = time.time()
        self.extras["timing"] = self.progress.timing()
        return write_run(self, data, results, self.load_status)


def describe_load(s) -> str:
    """The load's shape in a few words, for the phase line that starts it."""
    if s.shape == "rate":
        text = f"{s.rate_rps:g} requests/s"
    elif s.shape == "step":
        text = f"{s.users} users, {s.step_users} from +{s.step_at_s:g}s"
    else:
        text = f"{s.users} users"
    if s.long_answer_user:
        text += f" and one long answer ({s.long_answer_tokens} tokens)"
    if s.web_ui:
        text += f"; Locust's web UI at http://{s.web_ui}"
    return text
