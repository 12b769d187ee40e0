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
    victim = scenario.busiest_pod()

    # act
    scenario.disturb(victim.name)
    scenario.target.kill_pod(victim.name, scenario.kill_signal)

    # observe
    scenario.wait_recovered()
    scenario.cool_down()

    # judge
    scenario.judge(
        checks.killed_streams_fail_fast,
        checks.other_pods_untouched,
        checks.no_hung_streams,
        checks.recovery_time,
    )
