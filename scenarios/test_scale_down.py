"""Scale-down of a busy replica: several replicas, one long answer in flight on one of
them, and one replica is removed (an HPA or KEDA lowering the count, not to zero).

On a cluster (kube.scaler=cluster) the Deployment's own scaler lowers the count and its
ReplicaSet picks the replica; the report names the pod removed and why. With
kube.scaler=harness (and on the local target) rollcheck plays the scaler: one blind to
in-flight answers makes it the busy replica (pod-deletion-cost, as Kubernetes honours
it), an in-flight-aware one (autoscaler.policy: inflight) an idle one. Either way the
long answer must finish.
"""

import pytest

from harness import checks


@pytest.mark.scale_down
def test_scale_down(scenario):
    scenario.require_scaler()  # SKIPPED, with why, if no scaler targets the Deployment
    # steady state: every replica up, one long answer in flight on one of them
    scenario.steady_state(in_flight=1, users=0, long_answer_user=True, long_answer_count=1)
    busy = scenario.busiest_pod(min_in_flight=1)
    pods = scenario.target.ready_pods()

    # act: the scaler removes one replica; which one depends on its policy
    if scenario.cluster_scaler:
        scenario.hand_to_scaler()
        scenario.wait_scaler_removes(pods, busy=busy)
    else:
        if scenario.cfg.autoscaler.policy == "inflight":
            idle = [p for p in pods if scenario.target.in_flight(p.name) == 0]
            victim = max(idle or pods, key=lambda p: p.created_at)  # the ReplicaSet's newest
        else:  # blind to in-flight answers: the worst case is the busy replica
            victim = busy
        scenario.disturb(victim.name)
        scenario.target.scale_down(victim.name)

    # observe: the answer ends (finished, or cut by the drain's deadline)
    scenario.wait_load_idle()
    if not scenario.cluster_scaler:
        scenario.wait_recovered(replicas=scenario.cfg.replicas - 1)
    else:  # the count the scaler settled on
        scenario.wait_recovered(replicas=scenario.target.desired_replicas())
    scenario.cool_down()

    # judge: the only requests are the long answer's, sent before the act
    scenario.judge(checks.long_answer_survives_scale_down, slo_required=("before",))
