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
from harness.timeline import pod_lives


@pytest.mark.startup
def test_startup(scenario):
    t = scenario.cfg.scenario
    version = scenario.cfg.next_version
    probes = scenario.target.pod_probes()
    scenario.preconditions.require_gpus(scenario.cfg.strategy.resolve(scenario.cfg.replicas)[0])

    # act (below): the new version loads its weights for scenario.startup_version_s (the
    # simulator's); 0 on a real cluster: the new image's own start-up (kube.image)
    slow = {"startup_s": t.startup_version_s} if t.startup_version_s else {}
    scenario.versions.require_candidate(version, slow)  # a config error if it is no change

    scenario.steady_state()
    scenario.target.rollout(version, engine=slow)
    state, restarts = wait_version_started(scenario, version, t.startup_restarts)
    if state == "ready":
        scenario.recovery.wait_rollout()
        restarts |= {
            p.name: max(p.restarts, restarts.get(p.name, 0))
            for p in scenario.target.pods()
            if p.version == version
        }
    else:  # a crash loop never finishes: put the old version back
        scenario.target.rollout(
            scenario.cfg.version, engine={"startup_s": scenario.cfg.engine.startup_s}
        )
        scenario.recovery.wait_rollout()
    scenario.recovery.wait()
    scenario.cool_down()

    observed = observed_startup_s(scenario, version)
    if observed is not None:
        scenario.target.relint(min_startup_s=observed)  # RC002 with this run's start-up
    configured = kind_of(scenario.cfg.engine).startup_is_configured
    known = t.startup_version_s if slow and configured else observed
    scenario.judge(checks.starts_without_restarts(version, restarts, probes, known))


def wait_version_started(scenario, version: str, restarts: int) -> tuple[str, dict[str, int]]:
    """Until a pod of the new version is ready ("ready"), or one has been restarted
    `restarts` times ("crash loop"), or scenario.recovery_s passes ("timeout"). Returns
    that and the most restarts seen on each pod of the version (pods restarted and
    then removed are remembered)."""
    seen: dict[str, int] = {}  # the most restarts of each pod, over every look

    def settled() -> str | None:
        ready = False
        for p in scenario.versions.new_pods(version, scenario.target.pods()):
            seen[p.name] = max(seen.get(p.name, 0), p.restarts)
            ready = ready or (p.ready and not p.terminating)
        if any(n >= restarts for n in seen.values()):
            return "crash loop"
        return "ready" if ready else None

    state = scenario.wait_for(
        settled, scenario.cfg.scenario.recovery_s, f"version {version} to start"
    )
    return state or "timeout", seen


def observed_startup_s(scenario, version: str) -> float | None:
    """The quickest start-up of a pod of the version: its creation (or container
    start) to ready, from the target's events."""
    lives = pod_lives(scenario.target.events())
    took = [
        life.startup_s for life in lives if life.version == version and life.startup_s is not None
    ]
    return round(min(took), 2) if took else None
