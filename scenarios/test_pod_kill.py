"""Pod kill: an involuntary disruption (OOM, node loss) mid-stream.

Streams on the killed pod must fail fast with an error, never hang; streams on
other pods are untouched; traffic recovers within the set time.
"""

import pytest

from harness import checks


@pytest.mark.pod_kill
def test_pod_kill(scenario):
    # steady state
    scenario.steady_state()
    victim = scenario.disruption.busiest_pod()

    # act
    scenario.disruption.disturb(victim.name)
    scenario.disruption.kill(victim.name)  # and wait until the target shows the engine dead

    # observe: a replacement ready and serving
    scenario.recovery.wait_replaced(victim.name)
    scenario.cool_down()

    # judge
    # the killed pod's own streams may fail (fast); any other broken stream fails the run
    scenario.judge(
        checks.killed_streams_fail_fast,
        checks.recovery_time,
        expect_broken_on_victims=True,
    )
