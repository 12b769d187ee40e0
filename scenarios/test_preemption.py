"""Preemption: an involuntary disruption a PodDisruptionBudget does not stop. A pod of a
higher PriorityClass asks for the accelerators of the busiest engine pod's node; the real
kube-scheduler preempts an engine pod there (gracefully: its grace period runs), and its
replacement waits Pending while the preemptor holds them.

Streams in flight on the preempted pod must finish within its drain, as in drain; the
preemption may take no more pods than the PDB allowed; once the preemptor leaves, the
replacement must be ready and serving within the set time. SKIPPED on a target without a
scheduler, and on a cluster unless kube.allow_preemption is set.
"""

import time

import pytest

from harness import checks


@pytest.mark.preemption
def test_preemption(scenario):
    target = scenario.target
    scenario.preconditions.require("preempt an engine pod", target.preemption_blocker())

    # steady state: load running, streams in flight on the pod about to go
    scenario.steady_state()
    victim = scenario.disruption.busiest_pod(past_prestop=True)

    # act: the scheduler chooses among the engine pods on that node
    on_node = [p.name for p in target.pods() if p.node == victim.node and not p.terminating]
    scenario.disruption.disturb(*on_node)
    scenario.witnesses.record_health(victim.name)
    t_act = time.time()
    target.preempt(victim.name)
    scenario.disruption.confirm("the preemption", {"preempted"}, on_node, since=t_act)

    # observe: the preemptor holds the node, leaves, and the replacement runs
    scenario.hold(scenario.cfg.scenario.preemption_hold_s, "the preemptor holds the node")
    target.end_preemption()
    scenario.recovery.wait()
    scenario.cool_down()

    # judge
    scenario.judge(
        checks.in_flight_streams_finish,
        checks.no_abort_after_sigterm,
        checks.preemption_respects_pdb,
        checks.recovery_time,
    )
