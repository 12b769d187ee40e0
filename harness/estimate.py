"""How long a session will take, from the config alone, before it starts.

Each scenario is a chain of waits: settle, warm-up, steady state, the act and its
recovery, cool-down, stopping the load, judging. Each has a typical time (what it takes
when things go as configured: a pod's start-up, an answer's length at the engine's pace,
the planner's prediction for a rollout) and a worst case (every wait to its bound: the
setting that bounds it). The worst case is what a deadline must hold; the estimate is
what a session usually takes. Neither is measured: the session's own timing says what
it took (summary.json "timing").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from harness.plan import plan_rollout
from harness.progress import clock
from harness.rollout_math import resolve

STOP_MARGIN_S = 30.0  # LoadRun.stop's own margin beyond load.stop_timeout_s


@dataclass
class Part:
    what: str
    typical_s: float
    worst_s: float
    bound: str | None = None  # the setting that bounds the worst case ("scenario.recovery_s")


class Sum:
    """typical_s and worst_s: the sums over the items (parts, or scenarios)."""

    def _items(self) -> list:
        raise NotImplementedError

    @property
    def typical_s(self) -> float:
        return sum(p.typical_s for p in self._items())

    @property
    def worst_s(self) -> float:
        return sum(p.worst_s for p in self._items())


@dataclass
class ScenarioEstimate(Sum):
    name: str
    kind: str
    parts: list[Part] = field(default_factory=list)

    def _items(self) -> list:
        return self.parts


def pod_startup_s(cfg) -> float:
    """A pod's start-up, for the estimate: ui.pod_startup_s, else the engine's own."""
    given = cfg.ui.pod_startup_s
    return float(given) if given is not None else float(cfg.engine.startup_s)


def _mean_tokens(load) -> float:
    """The load's mean answer length (its max_tokens classes by weight)."""
    total = sum(s.weight for s in load.max_tokens) or 1.0
    return sum(s.tokens * s.weight for s in load.max_tokens) / total


def answer_s(cfg, tokens: int) -> float:
    """An answer of `tokens` at the engine's pace (its ttft and inter-token latency)."""
    return cfg.engine.ttft_s + tokens * cfg.engine.itl_s


def estimate_scenario(name: str, kind: str, cfg, target: str, params: dict | None = None):
    """The parts of one scenario run, typical and worst."""
    t, load = cfg.scenario, cfg.load
    startup = pod_startup_s(cfg)
    longest = max(s.tokens for s in load.max_tokens)
    settle_worst = (
        max(t.settle_s, 3 * cfg.engine.startup_s + 30) if target == "local" else t.settle_s
    )
    # the local target starts its engines for each scenario; a cluster's already run
    settle = startup + 1.0 if target == "local" else 2.0
    parts = [Part("settle", min(settle, settle_worst), settle_worst, "scenario.settle_s")]
    if kind == "preemption" and target == "local":  # SKIPPED once settled
        return ScenarioEstimate(name, kind, parts)
    if kind == "pd_prefill" and target == "kube":  # likewise: it runs on the local target
        return ScenarioEstimate(name, kind, parts)
    if kind == "pd_rollout" and target == "kube" and not cfg.kube.pd_prefill_deployment:
        return ScenarioEstimate(name, kind, parts)
    if kind in ("adapter_rollout", "weighted_canary", "shadow") and target == "kube":  # likewise
        return ScenarioEstimate(name, kind, parts)
    if t.warm_requests:
        warm = t.warm_requests * answer_s(cfg, 16)
        parts.append(Part("warm requests", warm, warm))
    parts.append(Part("warm-up", t.warmup_s, t.warmup_s, "scenario.warmup_s"))
    parts.append(Part("steady state", 1.0, t.steady_state_s, "scenario.steady_state_s"))
    parts += _act(kind, cfg, startup, params or {}, target)
    restores = ("rollout", "canary", "startup", "weighted_canary", "shadow", "pd_rollout")
    if target == "kube" and kind in restores:
        # the Deployment's template put back: a rollout the next scenario's settle waits for
        back = _rollout_s(cfg, startup, 1.0, cfg.strategy.max_surge, cfg.strategy.max_unavailable)
        parts.append(Part("the restore's rollout", back, 0.0, "scenario.settle_s"))
    cool = t.step_cool_down_s if kind == "scale_up" else t.cool_down_s
    parts.append(Part("cool-down", cool, cool, "scenario.cool_down_s"))
    stop_typical = min(load.stop_timeout_s, answer_s(cfg, longest) / 2)
    parts.append(
        Part(
            "stopping the load",
            stop_typical,
            load.stop_timeout_s + STOP_MARGIN_S,
            "load.stop_timeout_s",
        )
    )
    parts.append(Part("judging", 1.0, t.gateway_log_wait_s + 2.0, "scenario.gateway_log_wait_s"))
    return ScenarioEstimate(name, kind, parts)


def _act(kind: str, cfg, startup: float, params: dict, target: str = "kube") -> list[Part]:
    """The act and the waits after it, as each scenario file makes them (scenarios/):
    the typical time of each, and the bound its wait has."""
    t, load = cfg.scenario, cfg.load
    # recovery.wait follows a start-up that progresses up to settle_s (startup_stall_s)
    ceiling = max(t.recovery_s, t.settle_s) if t.startup_stall_s else t.recovery_s
    longest = answer_s(cfg, max(s.tokens for s in load.max_tokens))
    long_answer = answer_s(cfg, load.long_answer_tokens)
    rolling = _rollout_s(
        cfg, startup, longest, cfg.strategy.max_surge, cfg.strategy.max_unavailable
    )

    def part(what: str, typical: float, worst: float, bound: str = "scenario.recovery_s"):
        return Part(what, typical, worst, bound)

    victim = part("choosing the victim", 1.0, t.steady_state_s, "scenario.steady_state_s")
    recovered = part("recovery", 1.0, ceiling)
    act = ACTS.get(kind)
    if act is None:
        return [recovered]
    return act(
        _Act(
            cfg,
            kind,
            startup,
            params,
            target,
            t,
            load,
            ceiling,
            longest,
            long_answer,
            rolling,
            part,
            victim,
            recovered,
        )
    )


class _Act(NamedTuple):
    """What every scenario's act is estimated from (_act's context)."""

    cfg: object
    kind: str
    startup: float
    params: dict
    target: str
    t: object  # the config's scenario section
    load: object
    ceiling: float  # recovery.wait's bound
    longest: float  # the longest answer
    long_answer: float
    rolling: float  # a rollout with the config's strategy
    part: Callable[..., Part]
    victim: Part
    recovered: Part


def _act_rollout(c: _Act) -> list[Part]:
    # the scenario's own strategy (its parameters), else the config's
    surge = c.params.get("max_surge", c.cfg.strategy.max_surge)
    unavailable = c.params.get("max_unavailable", c.cfg.strategy.max_unavailable)
    duration = _rollout_s(c.cfg, c.startup, c.longest, surge, unavailable)
    return [c.part("the rollout", duration, c.t.recovery_s), c.recovered]


def _act_adapter_rollout(c: _Act) -> list[Part]:
    a = c.cfg.adapter
    asks = 2 * a.golden_prompts * answer_s(c.cfg, 64)  # every replica at once, twice
    steps = (len(a.steps) + 1) * a.step_s if a.versioned else 0.0
    return [
        c.victim,
        c.part("the golden prompts", asks, c.t.recovery_s),
        c.part("the steps", steps, steps, "adapter.step_s"),
    ]


def _act_weighted_canary(c: _Act) -> list[Part]:
    w = c.cfg.weighted_canary
    # a step ends once it holds min_samples / weight streams (the candidate's
    # min_samples, expected) and the candidate served them
    rate = c.load.users / max(0.1, answer_s(c.cfg, _mean_tokens(c.load)))
    steps = sum(max(w.step_s, min(w.step_max_s, w.min_samples / (rate * p / 100))) for p in w.steps)
    return [
        c.part("the candidate's start", c.startup, w.ready_s, "weighted_canary.ready_s"),
        c.part("the golden prompts", 8 * answer_s(c.cfg, 64), 8 * answer_s(c.cfg, 64), None),
        c.part(
            "the steps",
            steps,
            len(w.steps) * (w.step_max_s + w.ready_s),
            "weighted_canary.step_max_s",
        ),
        c.part("promoting or rolling back", c.rolling, c.t.recovery_s),
        c.recovered,
    ]


def _act_shadow(c: _Act) -> list[Part]:
    sh = c.cfg.shadow
    # the window ends once the candidate has answered min_samples mirrored requests
    rate = c.load.users / max(0.1, answer_s(c.cfg, _mean_tokens(c.load)))
    return [
        c.part("the candidate's start", c.startup, sh.ready_s, "shadow.ready_s"),
        c.part("the golden prompts", 8 * answer_s(c.cfg, 64), 8 * answer_s(c.cfg, 64), None),
        c.part(
            "the mirror",
            max(sh.window_s, min(sh.window_max_s, sh.min_samples / (rate * sh.percent / 100))),
            sh.window_max_s,
            "shadow.window_max_s",
        ),
        c.part(
            "the mirrored requests' end", answer_s(c.cfg, c.longest), sh.idle_s, "shadow.idle_s"
        ),
        c.part("removing the candidate", c.rolling, c.t.recovery_s),
        c.recovered,
    ]


def _act_pd_rollout(c: _Act) -> list[Part]:
    pr = c.cfg.pd_rollout
    asks = 2 * 8 * answer_s(c.cfg, 64)  # the golden prompts before and after, one at a time
    steps = 1 if c.params.get("order") == "together" else 2
    return [
        c.part("the golden prompts", asks, asks, None),
        c.part("the roles' rollouts", steps * c.rolling, steps * pr.role_s, "pd_rollout.role_s"),
        c.part("golden prompts after it", pr.after_s, pr.after_s, "pd_rollout.after_s"),
        c.recovered,
    ]


def _act_pd_prefill(c: _Act) -> list[Part]:
    zero = c.cfg.pd.zero_s if c.params.get("act") == "to_zero" else 0.0
    return [
        c.part("choosing the victim", 1.0, c.t.steady_state_s, "scenario.steady_state_s"),
        c.part("the act", zero + c.startup, zero + c.t.recovery_s),
        c.recovered,
    ]


def _act_canary(c: _Act) -> list[Part]:
    return [
        c.part("the canary's start", c.startup, c.cfg.canary.ready_s, "canary.ready_s"),
        c.part("the golden prompts", 8 * answer_s(c.cfg, 64), 8 * answer_s(c.cfg, 64), None),
        c.part("promoting or rolling back", c.rolling, c.t.recovery_s),
        c.recovered,
    ]


def _act_startup(c: _Act) -> list[Part]:
    start = max(c.startup, c.t.startup_version_s) * (1 + c.t.startup_restarts)
    return [
        c.part("the new version's start", start, c.t.recovery_s),
        c.part("the rollout back or on", c.rolling, c.t.recovery_s),
        c.recovered,
    ]


def _act_drain(c: _Act) -> list[Part]:
    drain = c.cfg.pod.prestop_s + min(c.longest, c.cfg.engine.shutdown_timeout_s or c.longest)
    return [
        c.victim,
        c.part(
            "the eviction",
            1.0,
            c.t.eviction_retry_s + c.t.steady_state_s,
            "scenario.eviction_retry_s",
        ),
        c.part("recovery", c.startup + drain, c.ceiling),
    ]


def _act_preemption(c: _Act) -> list[Part]:
    drain = c.cfg.pod.prestop_s + min(c.longest, c.cfg.engine.shutdown_timeout_s or c.longest)
    return [
        c.victim,
        c.part("the preemption to show", 1.0, c.t.recovery_s),
        c.part(
            "the preemptor's hold",
            c.t.preemption_hold_s,
            c.t.preemption_hold_s,
            "scenario.preemption_hold_s",
        ),
        c.part("recovery", c.startup + drain, c.ceiling),
    ]


def _act_node_loss(c: _Act) -> list[Part]:
    if c.target == "local":  # its own control plane's grace and the pods' toleration
        seen, evicted, back = c.cfg.node_monitor_grace_s, c.cfg.pod.unreachable_toleration_s, 0.5
    else:  # node-monitor-grace-period (40-50 s), the tolerations a fleet sets (30 s)
        seen, evicted, back = 45.0, 30.0, 5.0
    return [
        c.victim,
        c.part("the cluster to see the loss", seen, c.t.recovery_s),
        c.part("recovery elsewhere", c.startup + evicted, c.ceiling),
        c.part("the node's return", back, 60.0, None),
    ]


def _act_pod_kill_or_oom_kill(c: _Act) -> list[Part]:
    return [
        c.victim,
        c.part("the kill to show", 1.0, c.t.recovery_s),
        c.part("recovery", c.startup, c.ceiling),
    ]


def _act_scale_up(c: _Act) -> list[Part]:
    step = max(0.0, c.load.step_at_s - c.t.warmup_s)
    parts = [c.part("the load step", step, step + c.t.steady_state_s, "load.step_at_s")]
    if c.cfg.kube.scaler == "cluster":
        parts.append(c.part("the scaler's decision", c.t.hpa_sync_s, c.t.recovery_s))
    return parts + [
        c.part("new replicas", c.t.hpa_sync_s + c.startup, c.ceiling),
        c.part("the queues to clear", 1.0, 0.0),
    ]  # (within the recovery's bound)


def _act_scale_down(c: _Act) -> list[Part]:
    return [
        c.victim,
        c.part("the scale-down", c.t.hpa_sync_s + c.cfg.autoscaler.idle_s, c.t.recovery_s),
        c.part("the long answer", c.long_answer, c.t.recovery_s),
        c.recovered,
    ]


def _act_scale_to_zero(c: _Act) -> list[Part]:
    return [
        c.part("one replica", c.startup, c.ceiling),
        c.part("the scaler", c.t.hpa_sync_s, 0.0),
        c.part("zero replicas", c.long_answer + c.cfg.autoscaler.idle_s, c.t.recovery_s),
    ]


ACTS: dict[str, Callable[[_Act], list[Part]]] = {
    "rollout": _act_rollout,
    "adapter_rollout": _act_adapter_rollout,
    "weighted_canary": _act_weighted_canary,
    "shadow": _act_shadow,
    "pd_rollout": _act_pd_rollout,
    "pd_prefill": _act_pd_prefill,
    "canary": _act_canary,
    "startup": _act_startup,
    "drain": _act_drain,
    "preemption": _act_preemption,
    "node_loss": _act_node_loss,
    "pod_kill": _act_pod_kill_or_oom_kill,
    "oom_kill": _act_pod_kill_or_oom_kill,
    "scale_up": _act_scale_up,
    "scale_down": _act_scale_down,
    "scale_to_zero": _act_scale_to_zero,
}


def _rollout_s(cfg, startup: float, drain: float, surge, unavailable) -> float:
    """The planner's prediction for a rollout of cfg.replicas with this strategy."""
    replicas = max(1, cfg.replicas)
    try:
        s, u = resolve(surge, unavailable, replicas)
        return plan_rollout(replicas, startup + 0.5, drain, s, u, step_s=1.0).duration_s
    except ValueError:
        return startup * replicas


@dataclass
class Outlook(Sum):
    scenarios: list[ScenarioEstimate]

    def _items(self) -> list:
        return self.scenarios

    def over(self, deadline_s: float) -> list[str]:
        """When the worst case exceeds the deadline: the scenarios whose dropping would
        make it fit (the largest worst cases first, when at most half of them would do),
        and the bounds that weigh most, with the value each would need alone."""
        excess = self.worst_s - deadline_s
        if excess <= 0:
            return []
        advice = []
        drop, freed = [], 0.0
        for s in sorted(self.scenarios, key=lambda s: -s.worst_s):
            if freed >= excess:
                break
            drop.append(s)
            freed += s.worst_s
        if len(drop) <= max(1, len(self.scenarios) // 2):
            advice.append("drop " + ", ".join(f"{s.name} (worst {clock(s.worst_s)})" for s in drop))
        weights: dict[str, tuple[float, int]] = {}
        for s in self.scenarios:
            for p in s.parts:
                if p.bound and p.worst_s > p.typical_s:
                    total, n = weights.get(p.bound, (0.0, 0))
                    weights[p.bound] = (total + p.worst_s, n + 1)
        shorten = []
        for key, (total, n) in sorted(weights.items(), key=lambda kv: -kv[1][0])[:3]:
            value = self.bound_value(key)
            alone = value - excess / n if value is not None else None
            enough = f", at most {alone:.0f} s would fit alone" if alone and alone > 0 else ""
            shorten.append(f"{key} ({n} waits, {clock(total)} of the worst case{enough})")
        advice.append(("or shorten " if advice else "shorten ") + ", ".join(shorten))
        return advice

    def bound_value(self, key: str) -> float | None:
        """The setting's value, as the parts bounded by it alone carry it."""
        for s in self.scenarios:
            for p in s.parts:
                if p.bound == key and p.what in ("settle", "recovery", "steady state"):
                    return p.worst_s
        return None


def outlook(selected: list[tuple[str, str, dict]], cfg, target: str) -> Outlook:
    """selected: (name, kind, parameters) of each scenario run."""
    return Outlook([estimate_scenario(n, k, cfg, target, p) for n, k, p in selected])
