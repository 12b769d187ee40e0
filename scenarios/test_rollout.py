"""Rollout: a new engine version under load, with a chosen maxSurge / maxUnavailable.

No stream may break; available replicas never drop below replicas - maxUnavailable;
the duration is compared with the planner's prediction from this run's own pod start
and drain times; the report shows the share of traffic on each version over time.
"""

import pytest

from harness import checks

STRATEGIES = {
    "surge1-unavail0": ("1", "0"),
    "surge2-unavail1": ("2", "1"),
    "blue-green": ("100%", "0"),
}


@pytest.mark.rollout
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_rollout(scenario, strategy):
    max_surge, max_unavailable = STRATEGIES[strategy]

    surge, unavailable = scenario.resolve_strategy(max_surge, max_unavailable)
    scenario.require_gpus(surge)  # SKIPPED if the surge pods could never be scheduled
    scenario.require_candidate(scenario.cfg.next_version)  # a config error if it is no change

    # steady state
    scenario.steady_state()

    # act
    scenario.target.rollout(
        scenario.cfg.next_version, max_surge=max_surge, max_unavailable=max_unavailable
    )

    # observe: the rollout done, and every ready pod one it made, running the candidate
    scenario.wait_rollout()
    scenario.confirm_rolled_out(scenario.cfg.next_version)
    scenario.wait_recovered()
    scenario.cool_down()

    # judge
    scenario.judge(
        checks.capacity_floor_for(unavailable),
        checks.rollout_duration_for(surge, unavailable, scenario.cfg.strategy.gpu_bound),
    )
