"""Rollout: a new engine version under load, with a chosen maxSurge / maxUnavailable.

No stream may break; available replicas never drop below replicas - maxUnavailable;
the duration is compared with the planner's prediction from this run's own pod start
and drain times; the report shows the share of traffic on each version over time.
"""

import pytest

from harness import checks
from harness.config.schema import Strategy

STRATEGIES = {
    "surge1-unavail0": ("1", "0"),
    "surge2-unavail1": ("2", "1"),
    "blue-green": ("100%", "0"),
}


@pytest.mark.rollout
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_rollout(scenario, strategy):
    max_surge, max_unavailable = STRATEGIES[strategy]

    surge, unavailable = resolve_strategy(scenario, max_surge, max_unavailable)
    scenario.preconditions.require_gpus(surge)  # SKIPPED if the surge pods could never be scheduled
    scenario.versions.require_candidate(
        scenario.cfg.next_version
    )  # a config error if it is no change

    # steady state
    scenario.steady_state()

    # act
    scenario.target.rollout(
        scenario.cfg.next_version, max_surge=max_surge, max_unavailable=max_unavailable
    )

    # observe: the rollout done, and every ready pod one it made, running the candidate
    scenario.recovery.wait_rollout()
    confirm_rolled_out(scenario, scenario.cfg.next_version)
    scenario.recovery.wait()
    scenario.cool_down()

    # judge
    scenario.judge(
        checks.capacity_floor_for(unavailable),
        checks.rollout_duration_for(surge, unavailable, scenario.cfg.strategy.gpu_bound),
    )


def confirm_rolled_out(scenario, version: str) -> None:
    """After the rollout: every ready pod is one the rollout made, running the candidate.
    Otherwise the run stops (INCONCLUSIVE, or FAIL if a stream broke)."""
    pods = scenario.target.ready_pods()
    new = scenario.versions.new_pods(version, pods)
    old = [p.name for p in pods if p not in new]
    if old or not new:
        scenario.inconclusive(
            f"the rollout to {version} did not take effect: "
            + (f"{', '.join(old)} still serve{'s' if len(old) == 1 else ''} " if old else "")
            + f"({len(new)} ready pods were created by it and run the candidate)",
            stage="disruption",
        )
    scenario.target.action("rolled_out", version=version, pods=[p.name for p in new])


def resolve_strategy(scenario, max_surge: str, max_unavailable: str) -> tuple[int, int]:
    """maxSurge and maxUnavailable as pod counts for this run's replicas."""
    return Strategy(max_surge, max_unavailable).resolve(scenario.cfg.replicas)
