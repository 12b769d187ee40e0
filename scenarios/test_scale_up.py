"""Scale up: a load step, and how long TTFT breaks its SLO while new replicas start.

On a cluster (kube.scaler=cluster) the Deployment's own HPA or ScaledObject decides how
many replicas the step gets, and when; the report shows its decisions. Elsewhere (and
with kube.scaler=harness) rollcheck applies the HPA formula on in-flight requests.
"""

import pytest

from harness import checks


@pytest.mark.scale_up
def test_scale_up(scenario):
    scenario.require_scaler()  # SKIPPED, with why, if no scaler targets the Deployment
    # steady state: light load on a single replica
    scenario.prepare_replicas(1)
    scenario.require_gpus_for_step()  # SKIPPED if the new replicas could never be scheduled
    scenario.steady_state(shape="step", users=2, step_users=scenario.step_users, in_flight=1)
    if scenario.cluster_scaler:
        scenario.hand_to_scaler(as_act=False)  # it sees the steady state before the step

    # act: the step arrives; the autoscaler reacts
    scenario.wait_for_load_step()
    if scenario.cluster_scaler:
        replicas = scenario.wait_scaler_scaled_up(before=1)
    else:  # HPA arithmetic on in-flight requests, played by rollcheck
        replicas = scenario.autoscale_for_step()

    # observe
    scenario.wait_recovered(replicas=replicas)
    scenario.wait_queues_clear()
    scenario.cool_down(scenario.cfg.scenario.step_cool_down_s)

    # judge
    # the step and what follows are judged by how long TTFT takes to recover; the
    # budget holds before the step
    scenario.judge(
        checks.ttft_recovers_after_step,
        checks.recovery_time,
        slo_required=("before",),
        slo_phases=("before",),
    )
