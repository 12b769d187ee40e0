"""Adapter rollout: a LoRA adapter moved to its next version under load, as llm-d's
adapter rollout guide does it. A share of the load's requests name the adapter's
current version (adapter.share); the new version is loaded on every replica under a name
of its own, the requests move to it by weight (adapter.steps, each observed for
adapter.step_s), and the old version is unloaded.

Every stream to a version that exists must end complete; no request may name the old
version after its unload (the engine answers 404 "does not exist"), and its streams in
flight at the unload must finish; golden prompts asked of every replica directly must
show each version's own weights: an engine that keeps the old weights after a reload in
place under the same name (adapter.versioned=false) answers as before, and FAILs.
"""

import pytest

from harness import canary, checks
from harness.config.load import ModelShare


@pytest.mark.adapter_rollout
def test_adapter_rollout(scenario):
    target, a = scenario.target, scenario.cfg.adapter
    scenario.preconditions.require("load LoRA adapters", target.adapter_blocker())
    old, new = a.names()
    prompts = canary.load_prompts(a.prompts)[: a.golden_prompts]

    # steady state: the old version on every replica, a share of the load naming it
    pods = target.ready_pods()
    for pod in pods:
        target.load_adapter(pod.name, old, a.path_of(a.from_version))
    scenario.steady_state(models=[ModelShare(old, a.share)])
    before = scenario.versions.ask_each(pods, prompts, model=old)

    # act: the new version on every replica (in place, under the one name, if not versioned)
    for pod in pods:
        target.load_adapter(pod.name, new, a.path_of(a.to_version), inplace=not a.versioned)
    after = scenario.versions.ask_each(pods, prompts, model=new)

    # the requests move to it by weight, then the old version goes
    if a.versioned:
        for percent in a.steps:
            moved = a.share * percent / 100
            scenario.load.set_models([ModelShare(old, a.share - moved), ModelShare(new, moved)])
            target.action("adapter_share", adapter=new, percent=percent)
            scenario.hold(a.step_s, f"{percent}% of the adapter's requests on {new}")
        for pod in pods:
            target.unload_adapter(pod.name, old)
        scenario.hold(a.step_s, f"{old} unloaded")
    scenario.recovery.wait()  # the replicas as they were, serving: "after" from here
    scenario.cool_down()

    # judge
    answers = {"old": old, "new": new, "versioned": a.versioned, "before": before, "after": after}
    scenario.judge(checks.adapter_answers(answers), checks.adapter_unload_clean)
