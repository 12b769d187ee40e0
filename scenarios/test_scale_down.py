"""Scale-down of a busy replica: several replicas, one long answer in flight on one of
them, and one replica is removed (an HPA or KEDA lowering the count by one, not to zero).

A scaler blind to in-flight answers may remove any replica; rollcheck makes it the busy
one (pod-deletion-cost, as Kubernetes honours it), and the drain must then cover the
answer. An in-flight-aware scaler (autoscaler.policy: inflight) removes an idle replica
instead. Either way the long answer must finish.
"""

import pytest

from harness import checks


@pytest.mark.scale_down
def test_scale_down(scenario):
    # steady state: every replica up, one long answer in flight on one of them
    scenario.steady_state(in_flight=1, users=0, long_answer_user=True, long_answer_count=1)
    busy = scenario.busiest_pod(min_in_flight=1)

    # act: the scaler removes one replica; which one depends on its policy
    pods = scenario.target.ready_pods()
    if scenario.cfg.autoscaler.policy == "inflight" and not scenario.dry_run:
        idle = [p for p in pods if scenario.target.in_flight(p.name) == 0]
        victim = max(idle or pods, key=lambda p: p.created_at)  # the ReplicaSet's newest
    else:  # blind to in-flight answers: the worst case is the busy replica
        victim = busy
    scenario.disturb(victim.name)
    scenario.target.scale_down(victim.name)

    # observe: the answer ends (finished, or cut by the drain's deadline)
    scenario.wait_load_idle()
    scenario.wait_recovered(replicas=scenario.cfg.replicas - 1)
    scenario.cool_down()

    # judge: the only requests are the long answer's, sent before the act
    scenario.judge(checks.long_answer_survives_scale_down, slo_required=("before",))
