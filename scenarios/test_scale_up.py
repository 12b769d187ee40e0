"""Scale up: a load step, and how long TTFT breaks its SLO while new replicas start.

On a cluster (kube.scaler=cluster) the Deployment's own HPA or ScaledObject decides how
many replicas the step gets, and when; the report shows its decisions. Elsewhere (and
with kube.scaler=harness) rollcheck applies the HPA formula on in-flight requests.
"""

import time

import pytest

from harness import checks
from harness.plan import hpa_desired


@pytest.mark.scale_up
def test_scale_up(scenario):
    scenario.scaler.require()  # SKIPPED, with why, if no scaler targets the Deployment
    # steady state: light load on a single replica
    scenario.recovery.prepare_replicas(1)
    require_gpus_for_step(scenario)  # SKIPPED if the new replicas could never be scheduled
    scenario.steady_state(
        shape="step", users=2, step_users=scenario.cfg.scenario.step_users, in_flight=1
    )
    if scenario.scaler.cluster:
        scenario.scaler.hand_over(as_act=False)  # it sees the steady state before the step

    # act: the step arrives; the autoscaler reacts
    scenario.disruption.wait_for_load_step()
    if scenario.scaler.cluster:
        replicas = wait_scaler_scaled_up(scenario, before=1)
    else:  # HPA arithmetic on in-flight requests, played by rollcheck
        replicas = autoscale_for_step(scenario)

    # observe
    scenario.recovery.wait(replicas=replicas)
    scenario.recovery.wait_queues_clear()
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


def autoscale_for_step(scenario) -> int:
    """React to the load step as an HPA on in-flight requests per replica would."""
    scenario.let_pass(scenario.cfg.scenario.hpa_sync_s, "the HPA's sync")
    pods = scenario.target.ready_pods()
    busy = [scenario.target.pod_metrics(p.name) for p in pods]
    per_replica = sum(
        m.get("vllm:num_requests_running", 0) + m.get("vllm:num_requests_waiting", 0) for m in busy
    ) / max(1, len(pods))
    desired = hpa_desired(len(pods), per_replica, scenario.cfg.scenario.hpa_target_in_flight)
    scenario.target.scale(desired)
    return desired


def require_gpus_for_step(scenario) -> None:
    """Before acting (scale_up): SKIPPED if the replicas an HPA would add for the load
    step (scenario.step_users in flight, scenario.hpa_target_in_flight per replica)
    cannot all get GPUs."""
    current = len(scenario.target.ready_pods())
    per_replica = scenario.cfg.scenario.step_users / max(1, current)
    desired = hpa_desired(current, per_replica, scenario.cfg.scenario.hpa_target_in_flight)
    scenario.preconditions.require_gpus(
        desired - current,
        "the load step",
        "new replicas",
        "free GPUs, or lower scenario.step_users",
    )


def wait_scaler_scaled_up(scenario, before: int) -> int:
    """scale_up with the workload's own scaler: until it asks for more replicas than
    `before`, within scenario.recovery_s of the step; the count it asked for (or
    `before`, with the reason on the timeline, when it never did)."""
    since = scenario.disruption.t_step if scenario.disruption.t_step is not None else time.time()
    left = since + scenario.cfg.scenario.recovery_s - time.time()
    if scenario.wait_for(
        lambda: (scenario.target.desired_replicas() or 0) > before,
        max(0.0, left),
        "the scaler to add replicas",
    ):
        return scenario.target.desired_replicas() or before
    scenario.target.action(
        "not_recovered",
        why=f"the scaler asked for no replica beyond {before} within scenario.recovery_s "
        f"({scenario.cfg.scenario.recovery_s:g} s) of the load step",
    )
    return before
