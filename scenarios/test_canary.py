"""Canary: one replica of a new version under the usual streaming load; its answers to
golden prompts are compared with the baseline's (greedy, each pod asked directly, not
through the gateway). The rollout holds at that one candidate pod until judged:
agreeing answers promote the canary (the rollout goes on to every replica); diverging
answers roll it back to the baseline's template. Every stream is judged as in every
scenario, and the worst prompts are shown side by side in report.html.

A bad model answers 200 at normal latency and passes every probe: only its answers show
it. `--set canary.engine.degraded=true` makes the simulator's canary such a model.
"""

import time

import pytest

from harness import canary, checks
from harness.timeline import pods_ready_of


@pytest.mark.canary
def test_canary(scenario):
    cfg = scenario.cfg.canary
    version = cfg.version or scenario.cfg.next_version
    prompts = canary.load_prompts(cfg.prompts)
    engine = scenario.versions.candidate_engine(cfg)

    scenario.preconditions.require_gpus(1)  # the canary replica needs a GPU of its own
    # a config error if the candidate is the baseline (its version, or on a cluster its image)
    scenario.versions.require_candidate(
        version, dict(cfg.engine), "canary.version" if cfg.version else ""
    )

    # steady state, and the baseline's answers from one of its replicas
    scenario.steady_state()
    baseline_pod = scenario.target.ready_pods()[0]
    baseline = scenario.versions.ask(baseline_pod, prompts)

    # act: one canary replica of the new version, the rollout held there until judged
    scenario.target.start_canary(version, engine=engine)
    canary_pod = scenario.versions.wait_ready(version, cfg.ready_s)
    asked_at = time.time()
    candidate = scenario.versions.ask(canary_pod, prompts)
    serving = pods_ready_of(scenario.target.events(), version, asked_at, time.time())
    result = canary.compare(
        prompts, baseline, candidate, cfg.mode, cfg.min_agreement, cfg.agree_after_tokens
    )

    # promote (the rollout goes on), or roll back (the baseline's template)
    if result.status == "pass":
        action = "promoted"
        scenario.target.promote_canary()
    else:
        action = "rolled back"
        scenario.target.rollback_canary()
    scenario.recovery.wait_rollout()
    scenario.recovery.wait()
    scenario.cool_down()

    scenario.extras["canary"] = result.to_dict() | {
        "baseline_pod": baseline_pod.name,
        "candidate_pod": canary_pod.name,
        "candidate_pods_serving": serving,
        "action": action,
    }
    scenario.judge(checks.canary_answers(scenario.extras["canary"]))
