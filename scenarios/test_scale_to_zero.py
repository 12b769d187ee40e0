"""Scale to zero: one replica, idle by every web metric, decoding one long answer.

The autoscaler turns on; the answer must finish before the replica goes. A scaler
that reads request rate or queue length instead of in-flight sequences kills it.

On a cluster (kube.scaler=cluster) the Deployment's own ScaledObject decides: it holds
the count through a busy spell, then the load around the long answer stops (the act)
and the scaler alone decides when the replica goes. Elsewhere (and with
kube.scaler=harness) rollcheck's own scaler policy (autoscaler.policy) takes over.
"""

import time

import pytest

from harness import checks


@pytest.mark.scale_to_zero
def test_scale_to_zero(scenario):
    require_autoscaler(scenario)  # SKIPPED, with why, if there is no scaler to hand over to
    scenario.recovery.prepare_replicas(1)

    if scenario.scaler.cluster:
        # steady state: load on the single replica, one long answer among it; the scaler
        # watches it
        scenario.steady_state(
            shape="step", step_users=0, in_flight=1, long_answer_user=True, long_answer_count=1
        )
        scenario.scaler.hand_over(as_act=False)
        # act: the load around the long answer stops; only the answer is left
        scenario.disruption.wait_for_load_step()
    else:
        # steady state: nothing but one long answer in flight on a single replica
        scenario.steady_state(in_flight=1, users=0, long_answer_user=True, long_answer_count=1)
        # act: the deployment's own autoscaler policy takes over
        scenario.target.set_autoscaler(scenario.cfg.autoscaler.policy)

    # observe: the replica is scaled to zero (after the answer, if the scaler is right)
    wait_scaled_to_zero(scenario)
    scenario.cool_down()

    # judge: the long answer was sent before the act
    scenario.judge(
        checks.long_answer_finishes,
        checks.scaled_to_zero,
        slo_required=("before",),
    )


def require_autoscaler(scenario) -> None:
    """Before acting (scale_to_zero): SKIPPED if there is no scaler to hand over to, or
    (kube.scaler=cluster) none that ever takes the workload to zero."""
    blocker = scenario.target.autoscaler_blocker(to_zero=True)
    if blocker:
        scenario.preconditions.skip(f"cannot hand over to an autoscaler here: {blocker}")


def wait_scaled_to_zero(scenario) -> None:
    if scenario.wait_for(
        lambda: not scenario.target.pods(), scenario.cfg.scenario.recovery_s, "zero replicas"
    ):
        scenario.recovery.t_recovered = time.time()
