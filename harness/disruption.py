"""The disruption part of a Scenario: which pods to disturb, the act on them (a kill, an
eviction, a node drain, the load's step), and the wait until the target shows that the
act took effect. What it sets (the victims, their streams at the act, the step's time,
the killed engine's restarts) is what the judge and the recovery read."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from harness import checks as C
from harness import verdict as V
from harness.cluster.target import EvictionRefused, TargetError
from harness.events import Event, EventKind
from harness.scenario_context import ScenarioContext

# a drain's victim holds a stream expected to outlast its preStop by this factor and 0.5 s
# (the estimate is the stream's own pace so far, and the eviction takes time to land),
# waited for at most PREFER_WAIT_S (answers shorter than the preStop never will)
PRESTOP_MARGIN = 1.2
PREFER_WAIT_S = 10.0


class Disruption:
    def __init__(self, ctx: ScenarioContext):
        self.ctx = ctx
        self.target, self.cfg, self.progress = ctx.target, ctx.cfg, ctx.progress
        self.wait_for = ctx.wait_for
        self.victims: list[str] = []
        self.victim_in_flight: dict[str, int] = {}
        self.t_step: float | None = None  # when the load's step came (wait_for_load_step)
        self.restarts_at_kill = 0  # the killed pod's restarts before the kill

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
        load = self.ctx.load()
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
            self.ctx.stop(
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
        self.restarts_at_kill = before.restarts if before is not None else 0
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
                    e.kind == EventKind.ACTION
                    and e.detail.get("action") == "oom_answer"
                    and e.detail.get("retry") == retry
                    and C.answered_not_killed(e.detail)
                ):
                    return e
            return None

        seen = self.wait_for(ended, self.cfg.scenario.recovery_s, f"retry {retry}'s end")
        if seen is None or seen.kind == EventKind.ACTION:
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
            self.ctx.stop(
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
            steady = self.ctx.steady_at()
            evicted = [
                e.pod for e in self.target.events() if e.kind == EventKind.EVICTED and e.t >= steady
            ]
            how = (
                f"the disruption was cut short after evicting {', '.join(evicted)}"
                if evicted
                else "the disruption could not be made"
            )
            self.ctx.stop(
                f"{how}: the PodDisruptionBudget refused the eviction for "
                f"scenario.eviction_retry_s ({exc}); lower pdb.min_available or run more "
                "replicas",
                stage="disruption",
            )

    def wait_for_load_step(self) -> None:
        """Wait until the load shape's step happens, and mark it as the disruption."""
        settings = self.ctx.load().settings
        step_at = self.ctx.load().wait_until_step(
            settings.step_at_s + self.cfg.scenario.steady_state_s
        )
        # stamped when Locust stepped, not when this thread noticed: the step's first
        # requests belong to the disruption
        self.t_step = step_at
        self.target.action("load_step", users=settings.step_users, t=step_at)
        steady = self.ctx.steady_at()
        if step_at < steady:
            self.ctx.stop(
                f"the load step came {steady - step_at:.1f} s before the steady state was "
                f"reached (load.step_at_s {settings.step_at_s:g} s after the load "
                "started): its queueing is not the steady state's; raise load.step_at_s",
                stage="disruption",
            )

    @property
    def kill_signal(self) -> int:
        return signal.Signals[self.cfg.scenario.kill_signal]
