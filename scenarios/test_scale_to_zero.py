"""Scale to zero: one replica, idle by every web metric, decoding one long answer.

The autoscaler turns on; the answer must finish before the replica goes. A scaler
that reads request rate or queue length instead of in-flight sequences kills it.
"""

import pytest

from harness import checks


@pytest.mark.scale_to_zero
def test_scale_to_zero(scenario):
    scenario.require_autoscaler()  # SKIPPED, with why, if there is no scaler to hand over to

    # steady state: nothing but one long answer in flight on a single replica
    scenario.prepare_replicas(1)
    scenario.steady_state(in_flight=1, users=0, long_answer_user=True, long_answer_count=1)

    # act: the deployment's own autoscaler policy takes over
    scenario.target.set_autoscaler(scenario.cfg.autoscaler.policy)

    # observe: the replica is scaled to zero (after the answer, if the scaler is right)
    scenario.wait_scaled_to_zero()
    scenario.cool_down()

    # judge
    # the only request is the long answer, sent before the scaler took over
    scenario.judge(
        checks.long_answer_finishes,
        checks.scaled_to_zero,
        slo_required=("before",),
    )
