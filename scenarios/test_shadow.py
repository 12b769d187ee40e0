"""Shadow: the gateway copies a share of the requests (shadow.percent) to a candidate for a
window (shadow.window_s) and discards the candidate's answers, as a Gateway API
HTTPRoute's RequestMirror filter does; no user ever gets an answer from it. The window
goes on while either side's engines have answered fewer than shadow.min_samples requests
in it, up to shadow.window_max_s. The candidate has ceil(share x replicas) replicas, so
each of its replicas carries what a baseline replica does; its golden answers are asked
directly before the mirror starts.

Judged: no stream a user received came from the candidate (every record traced to its
pod); the candidate served what was mirrored to it (the gateway's log of each mirrored
request where it keeps one, and the candidate engines' own counters: a mirrored request it
refused, failed or aborted is named); and its TTFT and inter-token latency under that load
against the baseline's, from the engines' own histograms over the window. The candidate is
removed at the end, whatever was found: a shadow never promotes.
"""

import time

import pytest

from harness import canary, checks
from harness.engine_counts import EngineCounts
from harness.gateway_logs import read_access_log
from harness.histograms import ITL, TTFT, added, buckets, count, increase
from harness.weights import candidate_replicas, split_applied

POLL_S = 1.0  # the window's observations are counted this often once window_s has passed


@pytest.mark.shadow
def test_shadow(scenario):
    cfg, target = scenario.cfg.shadow, scenario.target
    version = cfg.version or scenario.cfg.next_version
    scenario.preconditions.require("mirror requests at the gateway", target.mirror_blocker())
    prompts = canary.load_prompts(cfg.prompts)
    engine = scenario.versions.candidate_engine(cfg)
    replicas = candidate_replicas(cfg.percent, scenario.cfg.replicas)
    scenario.preconditions.require_gpus(replicas)
    key = "shadow.version" if cfg.version else ""
    scenario.versions.require_candidate(version, dict(cfg.engine), key)

    # steady state, and the baseline's answers from one of its replicas
    scenario.steady_state()
    baseline_pod = target.ready_pods()[0]
    baseline = scenario.versions.ask(baseline_pod, prompts)

    # the candidate: its replicas, given no traffic; its answers asked directly
    target.start_candidate(version, engine, cfg.stable_selects_candidate)
    target.scale_candidate(replicas)
    ready = scenario.wait_for(
        lambda: (
            [p for p in target.ready_pods() if p.version == version][:replicas]
            if sum(p.version == version for p in target.ready_pods()) >= replicas
            else None
        ),
        cfg.ready_s,
        f"{replicas} replicas of {version} ready",
    )
    if not ready:
        scenario.inconclusive(
            f"{replicas} replicas of {version} were not ready within shadow.ready_s "
            f"({cfg.ready_s:g} s)",
            stage="disruption",
        )
    golden = canary.compare(
        prompts,
        baseline,
        scenario.versions.ask(ready[0], prompts),
        cfg.mode,
        cfg.min_agreement,
        cfg.agree_after_tokens,
    )

    # the mirror, for the window; the engines' histograms read before and after
    pods = [p.name for p in target.ready_pods()]
    before = {name: target.pod_metrics(name) for name in pods}
    started = mirrored_at(scenario, cfg.percent)
    what = f"{cfg.percent:g}% of the requests mirrored to {version}"
    scenario.hold(cfg.window_s, what)
    # and on while either side's engines have answered too few first tokens to compare
    # (a loaded machine, a small share), up to shadow.window_max_s
    candidate = {p.name for p in ready}
    while time.time() - started < cfg.window_max_s:
        now = {name: target.pod_metrics(name) for name in pods}
        if all(
            count(window_histogram(before, now, names, TTFT)) >= cfg.min_samples
            for names in (set(pods) - candidate, candidate)
        ):
            break
        scenario.load.hold(POLL_S, what)
    ended = mirrored_at(scenario, 0)
    scenario.wait_for(
        lambda: all(
            target.pod_metrics(p.name).get("vllm:num_requests_running", 0) == 0 for p in ready
        ),
        cfg.idle_s,
        f"{version} to finish the mirrored requests",
    )
    after = {name: target.pod_metrics(name) for name in pods}
    log = target.mirror_log()
    lines = read_access_log(log)[0] if log is not None else None

    # the candidate removed, the routes as they were
    target.rollback_canary()
    scenario.recovery.wait_rollout()
    target.end_split()
    scenario.recovery.wait()
    scenario.cool_down()

    scenario.extras["shadow"] = {
        "version": version,
        "percent": cfg.percent,
        "window": [started, ended],
        "candidate_pods": sorted(candidate),
        "golden": golden.to_dict() | {"baseline_pod": baseline_pod.name},
        # the gateway's line for each mirrored request; None where it keeps none (a
        # cluster's gateway): the share is then the candidate engines' own count
        "mirrored": None
        if lines is None
        else [
            {
                "request_id": g.request_id,
                "status": g.status,
                "upstream_status": g.upstream_status,
                "upstream_addr": g.upstream_addr,
                "request_time_s": g.request_time_s,
                "end_t": g.end_t,
            }
            for g in lines
        ],
        "candidate_finished": finished(before, after, candidate, started),
        "histograms": {
            side: {family: window_histogram(before, after, names, family) for family in (TTFT, ITL)}
            for side, names in (("baseline", set(pods) - candidate), ("candidate", candidate))
        },
        "min_samples": cfg.min_samples,
    }
    result = scenario.extras["shadow"]
    scenario.judge(
        checks.shadow_not_leaked(result),
        checks.shadow_served(result),
        checks.shadow_candidate(result),
    )


def mirrored_at(scenario, percent: float) -> float:
    """Set the mirror to `percent` and return when the gateway applied it."""
    target = scenario.target
    asked = time.time()
    target.set_mirror(percent)
    applied = scenario.wait_for(
        lambda: split_applied(target.events(), "mirror", percent, asked),
        30.0,
        f"the gateway to mirror {percent:g}% of the requests",
    )
    if applied is None:
        scenario.inconclusive(
            f"the gateway did not apply a mirror of {percent:g}% within 30 s", stage="disruption"
        )
    return applied


def finished(before: dict, after: dict, pods: set[str], since: float) -> dict[str, int]:
    """The candidate engines' own count of the requests they finished in the window, by
    finished_reason (vllm:request_success_total's increase from the read before it,
    across a restart: harness.engine_counts)."""
    counts = EngineCounts(t_start=since)
    for pod in pods:
        for metrics in (before.get(pod, {}), after.get(pod, {})):
            # created_at 0: a pod there before the window, its counts so far not the window's
            counts.sample(since, pod, 0.0, metrics)
    return counts.finished()


def window_histogram(before: dict, after: dict, pods: set[str], family: str) -> list:
    """One side's histogram over the window: each pod's increase, summed."""
    total: list = []
    for pod in pods:
        grew = increase(buckets(before.get(pod, {}), family), buckets(after.get(pod, {}), family))
        total = added(total, grew)
    return [[bound if bound != float("inf") else "+Inf", n] for bound, n in total]
