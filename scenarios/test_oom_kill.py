"""OOM kill: an involuntary disruption no PodDisruptionBudget stops. One request whose
context the engine's memory limit cannot hold, sent to the busiest replica: the kernel
(or the local kubelet at the limit) kills the engine mid-stream, the kubelet restarts it.

Streams on it must fail fast with an error, never hang; streams on other pods are
untouched; the restarted engine serves again within the set time; and nothing is
OOMKilled after it (the load alone crossing the limit is a crash loop). With
scenario.oom_retries the request is sent again to the engine that came back, as a client
retries one that got no answer: each kill it causes is a crash loop of one request.
"""

import pytest

from harness import checks


@pytest.mark.oom_kill
def test_oom_kill(scenario):
    # steady state
    scenario.steady_state()
    victim = scenario.disruption.busiest_pod()

    # act: the request, and wait until the target shows the engine dead
    scenario.disruption.disturb(victim.name)
    scenario.disruption.kill(victim.name, by="memory")

    # observe: the restarted engine (or a replacement) ready and serving; a client that
    # retries the request that got no answer sends it again to the engine that came back
    scenario.recovery.wait_replaced(victim.name)
    for retry in range(1, scenario.cfg.scenario.oom_retries + 1):
        if scenario.disruption.kill(victim.name, by="memory", retry=retry) is None:
            break  # answered this time (refused, or served): nothing more to retry
        scenario.recovery.wait_replaced(victim.name)
    scenario.cool_down()

    # judge
    scenario.judge(
        checks.oom_killed_once,
        checks.killed_streams_fail_fast,
        checks.recovery_time,
        expect_broken_on_victims=True,
    )
