"""The rollout planner: docs/facts.md's stepwise rollout model, and the HPA's scale-up arithmetic.

At each step: start one new pod if total < replicas + maxSurge (and fewer than
`replicas` new pods exist); otherwise start draining one old pod if
available - 1 >= replicas - maxUnavailable. New pods are ready `ready_s` after
they start; a draining pod leaves `drain_s` later. With `gpu_bound` (the model
in facts.md) a draining pod still holds its GPU and counts toward the total;
without it, Kubernetes' own rule, where terminating pods do not count.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field


@dataclass
class RolloutPlan:
    replicas: int
    max_surge: int
    max_unavailable: int
    duration_s: float
    min_available: int
    max_pods: int
    steps: list[tuple[float, str]] = field(default_factory=list)

    @property
    def extra_gpus(self) -> int:
        return self.max_pods - self.replicas


MAX_REPLICAS = 10_000  # the step simulation is O(replicas x steps); no fleet is larger
MAX_SECONDS = 10_000_000.0  # about 115 days
MAX_METRIC = 1e12


def check_inputs(**values: float) -> None:
    """plan's inputs bounded: finite, not absurd (one ValueError line naming the option)."""
    for name, value in values.items():
        option = "--" + name.replace("_", "-")
        if not math.isfinite(value):
            raise ValueError(f"{option} must be a finite number, not {value}")
        if name == "replicas" and not 1 <= value <= MAX_REPLICAS:
            raise ValueError(f"{option} must be 1 to {MAX_REPLICAS}, not {value:g}")
        if value < 0:
            raise ValueError(f"{option} cannot be negative ({value:g})")
        if name.endswith("_s") and value > MAX_SECONDS:
            raise ValueError(f"{option} must be at most {MAX_SECONDS:g} seconds, not {value:g}")
        if name.endswith("per_replica") and value > MAX_METRIC:
            raise ValueError(f"{option} must be 0 to {MAX_METRIC:g}, not {value:g}")


def plan_rollout(
    replicas: int,
    ready_s: float,
    drain_s: float,
    max_surge: int,
    max_unavailable: int,
    gpu_bound: bool = True,
    step_s: float = 5.0,
    max_steps: int = 100_000,
) -> RolloutPlan:
    check_inputs(replicas=replicas, ready_s=ready_s, drain_s=drain_s, step_s=step_s)
    if replicas < 1:
        raise ValueError("replicas must be at least 1")
    if min(ready_s, drain_s, max_surge, max_unavailable) < 0 or step_s <= 0:
        raise ValueError("durations and counts cannot be negative")
    if max(max_surge, max_unavailable) > MAX_REPLICAS:
        raise ValueError(f"maxSurge and maxUnavailable must be at most {MAX_REPLICAS}")
    if max_surge == 0 and max_unavailable == 0:
        raise ValueError("maxSurge and maxUnavailable cannot both be 0")
    old_serving = replicas
    draining: deque[float] = deque()  # leave times, in order: each step is O(log n)
    new_started: list[float] = []  # ready times, in order
    min_available = replicas
    max_pods = replicas
    steps: list[tuple[float, str]] = []
    for i in range(max_steps):
        t = i * step_s
        while draining and draining[0] <= t:
            draining.popleft()
        new_ready = bisect.bisect_right(new_started, t)
        available = old_serving + new_ready
        min_available = min(min_available, available)
        if old_serving == 0 and not draining and new_ready == replicas:
            return RolloutPlan(
                replicas, max_surge, max_unavailable, t, min_available, max_pods, steps
            )
        total = old_serving + len(new_started) + (len(draining) if gpu_bound else 0)
        if total < replicas + max_surge and len(new_started) < replicas:
            new_started.append(t + ready_s)
            steps.append((t, "start new"))
        elif old_serving > 0 and available - 1 >= replicas - max_unavailable:
            old_serving -= 1
            draining.append(t + drain_s)
            steps.append((t, "drain old"))
            min_available = min(min_available, available - 1)
        max_pods = max(max_pods, old_serving + len(new_started) + len(draining))
    raise ValueError(
        f"the rollout does not finish within {max_steps} steps of {step_s:g} s; "
        "raise --step-s, or check --max-surge and --max-unavailable"
    )


def hpa_desired(current: int, metric: float, target: float, tolerance: float = 0.1) -> int:
    """Kubernetes HPA: ceil(current * metric / target), unchanged within the tolerance."""
    if target <= 0:
        raise ValueError("target must be positive")
    ratio = metric / target
    if abs(ratio - 1.0) <= tolerance:
        return current
    return max(1, math.ceil(current * ratio))


@dataclass
class ScaleUpPlan:
    desired: int
    lag_s: float  # from the load step until the new replicas are ready


def plan_scale_up(
    current: int,
    load_per_replica: float,
    target_per_replica: float,
    ready_s: float,
    sync_period_s: float = 15.0,
) -> ScaleUpPlan:
    """A load step: the HPA notices within one sync period, new pods take ready_s."""
    check_inputs(
        replicas=current,
        load_per_replica=load_per_replica,
        target_per_replica=target_per_replica,
        ready_s=ready_s,
        sync_period_s=sync_period_s,
    )
    desired = hpa_desired(current, load_per_replica, target_per_replica)
    lag = 0.0 if desired <= current else sync_period_s + ready_s
    return ScaleUpPlan(desired, lag)
