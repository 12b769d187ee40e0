"""Drain: evict a pod (or drain its node) while it streams answers.

Streams in flight on the evicted pod must finish normally; no request that
reaches it after SIGTERM may be aborted or refused; what /health said during
the drain is recorded in the report.
"""

import pytest

from harness import checks


@pytest.mark.drain
@pytest.mark.parametrize("what", ["pod", "node"])
def test_drain(scenario, what):
    if what == "node":
        require_node_drain(scenario)  # SKIPPED, with why, if this target may not

    # steady state: load running, streams in flight on the pod about to go
    scenario.steady_state()
    victim = scenario.disruption.busiest_pod(
        past_prestop=True
    )  # so a stream is in flight at SIGTERM

    # act
    if what == "pod":
        scenario.disruption.disturb(victim.name)
        scenario.witnesses.record_health(victim.name)
        scenario.disruption.evict(victim.name)
    else:
        on_node = [p.name for p in scenario.target.pods() if p.node == victim.node]
        scenario.disruption.disturb(*on_node)
        scenario.witnesses.record_health(victim.name)
        scenario.disruption.drain(victim.node)

    # observe
    scenario.recovery.wait()
    scenario.cool_down()

    # judge (every scenario also runs the shared stream checks: broken, hung, gateway, SLOs)
    scenario.judge(
        checks.in_flight_streams_finish,
        checks.no_abort_after_sigterm,
        checks.recovery_time,
    )


def require_node_drain(scenario) -> None:
    """Before acting: SKIPPED if this target may not drain a node."""
    scenario.preconditions.require("drain a node", scenario.target.node_drain_blocker())
