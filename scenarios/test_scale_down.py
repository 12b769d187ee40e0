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
    scenario.scaler.require()  # SKIPPED, with why, if no scaler targets the Deployment
    # steady state: every replica up, one long answer in flight on one of them
    scenario.steady_state(in_flight=1, users=0, long_answer_user=True, long_answer_count=1)
    busy = scenario.disruption.busiest_pod(min_in_flight=1)
    pods = scenario.target.ready_pods()

    # act: the scaler removes one replica; which one depends on its policy
    if scenario.scaler.cluster:
        scenario.scaler.hand_over()
        wait_scaler_removes(scenario, pods, busy=busy)
    else:
        if scenario.cfg.autoscaler.policy == "inflight":
            idle = [p for p in pods if scenario.target.in_flight(p.name) == 0]
            victim = max(idle or pods, key=lambda p: p.created_at)  # the ReplicaSet's newest
        else:  # blind to in-flight answers: the worst case is the busy replica
            victim = busy
        scenario.disruption.disturb(victim.name)
        scenario.target.scale_down(victim.name)

    # observe: the answer ends (finished, or cut by the drain's deadline)
    wait_load_idle(scenario)
    if not scenario.scaler.cluster:
        scenario.recovery.wait(replicas=scenario.cfg.replicas - 1)
    else:  # the count the scaler settled on
        scenario.recovery.wait(replicas=scenario.target.desired_replicas())
    scenario.cool_down()

    # judge: the only requests are the long answer's, sent before the act
    scenario.judge(checks.long_answer_survives_scale_down, slo_required=("before",))


def wait_scaler_removes(scenario, pods: list, busy=None) -> str | None:
    """scale_down with the workload's own scaler: until the ReplicaSet removes one of
    `pods` (within scenario.recovery_s); that pod, now the victim, why the ReplicaSet
    chose it and whether it was `busy` (the pod with the long answer), on the
    timeline. None when no replica went."""
    names = {p.name for p in pods}

    def removed() -> list[str]:
        """[the pod removed], or [None] when every pod went at once (none to name)."""
        live = scenario.target.pods()
        gone = [p.name for p in live if p.name in names and p.terminating]
        return gone[:1] or ([] if live else [None])

    gone = scenario.wait_for(
        removed, scenario.cfg.scenario.recovery_s, "the scaler to remove a replica"
    )
    if gone is None:
        scenario.target.action(
            "not_recovered",
            why="the scaler removed no replica within scenario.recovery_s "
            f"({scenario.cfg.scenario.recovery_s:g} s) of the hand-over",
        )
        return None
    if gone == [None]:
        return None
    scenario.disruption.victims = gone
    why = scenario.target.why_removed(gone[0])
    held = None if busy is None else busy.name == gone[0]
    scenario.target.action("scaler_removed", pod=gone[0], why=why, busy=held)
    return gone[0]


def wait_load_idle(scenario) -> None:
    """Until no request of the load is in flight (a long answer has ended, one way or
    another), for at most scenario.recovery_s."""
    scenario.wait_for(
        lambda: scenario.load.counts()["in_flight"] == 0,
        scenario.cfg.scenario.recovery_s,
        "the answers in flight to end",
    )
