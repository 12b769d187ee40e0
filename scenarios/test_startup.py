"""Start-up: roll out a version whose engine takes longer to start (weights loading) than
the liveness probe allows, under load.

With a startupProbe, liveness waits until the engine has started, and the rollout
completes. Without one (or with one too short), the kubelet kills the engine while it
loads weights, again and again: the new version never serves and the rollout never
finishes. The verdict names the restarts, the probe that caused them and the arithmetic;
a crash-looping version is rolled back. On Kubernetes the preflight rules run again with
the start-up time this run observed (RC002).
"""

import pytest

from harness import checks
from harness.engines.kinds import kind_of


@pytest.mark.startup
def test_startup(scenario):
    t = scenario.cfg.scenario
    version = scenario.cfg.next_version
    probes = scenario.pod_probes()
    scenario.require_gpus(scenario.cfg.strategy.resolve(scenario.cfg.replicas)[0])

    # act (below): the new version loads its weights for scenario.startup_version_s (the
    # simulator's); 0 on a real cluster: the new image's own start-up (kube.image)
    slow = {"startup_s": t.startup_version_s} if t.startup_version_s else {}
    scenario.require_candidate(version, slow)  # a config error if it is no change

    scenario.steady_state()
    scenario.target.rollout(version, engine=slow)
    state, restarts = scenario.wait_version_started(version, t.startup_restarts)
    if state == "ready":
        scenario.wait_rollout()
        restarts |= {
            p.name: max(p.restarts, restarts.get(p.name, 0))
            for p in scenario.target.pods()
            if p.version == version
        }
    else:  # a crash loop never finishes: put the old version back
        scenario.target.rollout(
            scenario.cfg.version, engine={"startup_s": scenario.cfg.engine.startup_s}
        )
        scenario.wait_rollout()
    scenario.wait_recovered()
    scenario.cool_down()

    observed = scenario.observed_startup_s(version)
    if observed is not None:
        scenario.relint(min_startup_s=observed)  # RC002 with this run's start-up
    configured = kind_of(scenario.cfg.engine).startup_is_configured
    known = t.startup_version_s if slow and configured else observed
    scenario.judge(checks.starts_without_restarts(version, restarts, probes, known))
