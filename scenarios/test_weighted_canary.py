"""Weighted canary: a candidate version given a share of the traffic at the gateway in
steps (weighted_canary.steps, e.g. 10%, 50%, 100%), as a Gateway API HTTPRoute's
backendRefs weights move it. Before any traffic moves, the candidate's answers to golden
prompts are compared with a baseline replica's (each asked directly). At each step the
candidate has ceil(weight x replicas) replicas (as Argo Rollouts scales a canary), and
the step is observed for weighted_canary.step_s, and on until it holds the streams that
give the candidate weighted_canary.min_samples at its weight and the candidate served as
many: the share each version served (every stream traced to its pod through the
gateway's log) against the weight, and the candidate's streams against the baseline's
(broken streams, goodput, TTFT and median ITL, with the tests a session comparison
makes). A step that fails rolls back (weight 0,
the candidate's replicas removed); the last one passing promotes (the gateway routes to
every replica alike again, and the rollout goes on).
"""

import json
import time

import pytest

from harness import canary, checks
from harness.gateway_logs import read_access_log
from harness.timeline import correlate
from harness.weights import (
    Step,
    Window,
    candidate_replicas,
    judge_step,
    split_applied,
    windows,
)

POLL_S = 1.0  # a step's streams are counted this often once its shortest window has passed


@pytest.mark.weighted_canary
def test_weighted_canary(scenario):
    cfg, target = scenario.cfg.weighted_canary, scenario.target
    version = cfg.version or scenario.cfg.next_version
    scenario.preconditions.require(
        "split traffic by weight at the gateway", target.weight_blocker()
    )
    prompts = canary.load_prompts(cfg.prompts)
    engine = scenario.versions.candidate_engine(cfg)
    scenario.preconditions.require_gpus(1)  # the candidate's first replica
    key = "weighted_canary.version" if cfg.version else ""
    scenario.versions.require_candidate(version, dict(cfg.engine), key)

    # steady state, and the baseline's answers from one of its replicas
    scenario.steady_state()
    baseline_pod = target.ready_pods()[0]
    baseline = scenario.versions.ask(baseline_pod, prompts)

    # the candidate: one replica, no traffic yet; its answers before any traffic moves
    target.start_candidate(version, engine, cfg.stable_selects_candidate)
    candidate_pod = scenario.versions.wait_ready(version, cfg.ready_s)
    golden = canary.compare(
        prompts,
        baseline,
        scenario.versions.ask(candidate_pod, prompts),
        cfg.mode,
        cfg.min_agreement,
        cfg.agree_after_tokens,
    )

    # the steps, each judged live on the streams seen so far; the first that fails ends them
    steps = []
    if golden.status == "pass":
        for percent in cfg.steps:
            step = observe_step(scenario, version, percent)
            steps.append(step.to_dict())
            if step.status != "pass":
                break
    passed = golden.status == "pass" and len(steps) == len(cfg.steps)
    passed = passed and all(s["status"] == "pass" for s in steps)
    if passed:  # promote: every replica alike at the gateway, and the rollout goes on
        action = "promoted"
        target.end_split()
        target.promote_canary()
    else:  # roll back: no traffic to the candidate, its replicas removed
        action = "rolled back" + (
            f" at {steps[-1]['percent']:g}%" if steps else " before any traffic"
        )
        target.set_weight(0)
        target.rollback_canary()
    scenario.recovery.wait_rollout()
    target.end_split()
    scenario.recovery.wait()
    scenario.cool_down()

    scenario.extras["weighted_canary"] = {
        "version": version,
        "steps_asked": cfg.steps,
        "steps": steps,  # as judged live, on the streams sent and ended by each step's end
        "action": action,
        "golden": golden.to_dict() | {"baseline_pod": baseline_pod.name},
        "candidate_pod": candidate_pod.name,
        "min_samples": cfg.min_samples,
    }
    result = scenario.extras["weighted_canary"]
    scenario.judge(checks.weighted_split(result), checks.weighted_candidate(result))


def observe_step(scenario, version: str, percent: float):
    """Scale the candidate to its replicas for `percent`, give it the weight, and observe
    the step from when the gateway applied it: the judgement on the streams sent from then
    to the step's end, or to when the oldest stream still in flight was sent (every one
    counted has ended, the slower version's as much as the faster's)."""
    cfg, target = scenario.cfg.weighted_canary, scenario.target
    replicas = candidate_replicas(percent, scenario.cfg.replicas)
    target.scale_candidate(replicas)
    ready = scenario.wait_for(
        lambda: sum(p.version == version for p in target.ready_pods()) >= replicas,
        cfg.ready_s,
        f"{replicas} replicas of {version} ready",
    )
    asked = time.time()
    if not ready:
        return Step(
            percent,
            asked,
            asked,
            reasons=[
                f"{replicas} replicas of {version} were not "
                f"ready within weighted_canary.ready_s ({cfg.ready_s:g} s)"
            ],
        )
    target.set_weight(percent)
    applied = scenario.wait_for(
        lambda: split_applied(target.events(), "percent", percent, asked),
        30.0,
        f"the gateway to apply a weight of {percent:g}%",
    )
    if applied is None:
        return Step(
            percent,
            asked,
            time.time(),
            reasons=["the gateway did not apply the weight within 30 s"],
        )
    scenario.hold(cfg.step_s, f"{percent:g}% of the requests on {version}")
    reference = None
    while True:
        records, settled = traced_so_far(scenario)
        if reference is None:  # the baseline before any traffic moved (a step at 100%)
            first = windows(target.events(), time.time())[0].start  # this one, at the latest
            reference = [r for r in records if r.sent_at < first]
        step = judge_step(
            Window(percent, applied, max(applied, min(time.time(), settled))),
            records,
            version,
            reference,
            scenario.cfg.slo.ttft_s,
            cfg.min_samples,
        )
        if step.has_enough(cfg.min_samples) or time.time() - applied >= cfg.step_max_s:
            return step
        scenario.load.hold(POLL_S, f"{percent:g}% on {version}")


def traced_so_far(scenario) -> tuple[list, float]:
    """The load's records so far (the streams that have ended), each traced to its pod
    and version through the gateway's log as gather() traces them at the end, and the
    time before which every stream sent has ended (LoadRun.settled_at): for a
    decision made while the load runs (weighted_canary's steps), which counts the
    streams sent before that time (the ones ended by now favour the faster answers).
    A line the load's master is still writing is left for the next call."""
    from harness.streams import StreamRecord

    settled = scenario.load.settled_at() if scenario.load is not None else None
    settled = time.time() if settled is None else settled
    path = scenario.run_dir / "records.jsonl"
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return [], settled
    records = [
        StreamRecord.from_dict(json.loads(line))
        for line in text[: text.rfind("\n") + 1].splitlines()
        if line.strip()
    ]
    access_path, _ = scenario.target.gateway_logs()
    access = read_access_log(access_path)[0] if access_path else []
    correlate(records, access, scenario.target.events())
    return records, settled
