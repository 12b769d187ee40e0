"""Canary: one replica of a new version under the usual streaming load; its answers to
golden prompts are compared with the baseline's (greedy, each pod asked directly, not
through the gateway). Agreeing answers promote the canary (the rollout completes);
diverging answers roll it back. Every stream is judged as in every scenario, and the
worst prompts are shown side by side in report.html.

A bad model answers 200 at normal latency and passes every probe: only its answers show
it. `--set canary.engine.degraded=true` makes the simulator's canary such a model.
"""

import pytest

from harness import canary, checks


@pytest.mark.canary
def test_canary(scenario):
    cfg = scenario.cfg.canary
    version = cfg.version or scenario.cfg.next_version
    prompts = canary.load_prompts(cfg.prompts)
    engine = dict(cfg.engine)
    if cfg.mode == "same" and scenario.target.name == "local" and scenario.cfg.engine.kind == "sim":
        # an engine upgrade keeps the weights: the simulator answers from them, not its version
        engine = {"weights": scenario.cfg.engine.weights or scenario.cfg.version} | engine

    scenario.require_gpus(1)  # the canary replica needs a GPU of its own
    # a config error if the candidate is the baseline (its version, or on a cluster its image)
    scenario.require_candidate(version, dict(cfg.engine), "canary.version" if cfg.version else "")

    # steady state, and the baseline's answers from one of its replicas
    scenario.steady_state()
    baseline_pod = scenario.target.ready_pods()[0]
    baseline = scenario.ask(baseline_pod, prompts)

    # act: one canary replica of the new version (surge 1, nothing taken down first)
    scenario.target.rollout(version, engine=engine, max_surge="1", max_unavailable="0")
    canary_pod = scenario.wait_version_ready(version, cfg.ready_s)
    candidate = scenario.ask(canary_pod, prompts)
    result = canary.compare(prompts, baseline, candidate, cfg.mode, cfg.min_agreement)

    # promote, or roll back to the baseline's settings
    if result.status == "pass":
        action = "promoted"
    else:
        action = "rolled back"
        back = {k: getattr(scenario.cfg.engine, k) for k in engine}
        scenario.target.rollout(scenario.cfg.version, engine=back)
    scenario.wait_rollout()
    scenario.wait_recovered()
    scenario.cool_down()

    scenario.extras["canary"] = result.to_dict() | {
        "baseline_pod": baseline_pod.name,
        "candidate_pod": canary_pod.name,
        "action": action,
    }
    scenario.judge(checks.canary_answers(scenario.extras["canary"]))
