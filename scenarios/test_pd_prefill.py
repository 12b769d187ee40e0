"""P/D prefill disruptions: a prefill pod drained or killed while decode pods wait on it
(their routing sidecars' prefills in flight there), or the prefill role scaled to zero
under load (and back). The decode side must answer each request: from another prefill
pod, by prefilling it itself (a decode-only fallback), or with an error; never hang.

Judged: the shared stream checks on every request the users sent (a stream hung on a
prefill that never answers, a 502 passed on for a killed one), and the decode pods' view:
the prefills in flight on the victim at the act (the prefill Service's log, each with how
it ended) and what the decode pods did with the prefills that failed (their logs: passed
on as the client's error, or prefilled there instead).
"""

import time

import pytest

from harness import checks
from harness.cluster.target import TargetError
from harness.events import EventKind
from harness.gateway_logs import read_access_log
from harness.pd import decode_fallbacks, held_by
from harness.timeline import address_spans

# (not "scale_to_zero": -k scale_to_zero selects the decode role's own scenario)
ACTS = ("drain", "kill", "to_zero")
ACTIONS = {"drain": "evict", "kill": "kill", "to_zero": "scale"}


@pytest.mark.pd_prefill
@pytest.mark.parametrize("act", ACTS)
def test_pd_prefill(scenario, act):
    target, cfg = scenario.target, scenario.cfg
    scenario.preconditions.require("disrupt the prefill role", target.pd_blocker())
    prefill_replicas = cfg.pd.prefill_replicas

    # steady state: a prefill pod with prefills in flight, decode pods waiting on it
    scenario.steady_state()
    try:
        victim = target.busiest_pod(1, cfg.scenario.steady_state_s, among=target.prefill_pods).name
    except TargetError:
        scenario.inconclusive(
            "no prefill pod had a prefill in flight within scenario.steady_state_s "
            f"({cfg.scenario.steady_state_s:g} s): make prefills longer (pd.prefill_engine.ttft_s)"
        )

    # act
    restarts = next(p.restarts for p in target.prefill_pods() if p.name == victim)
    before = time.time()
    if act == "drain":
        target.evict_pod(victim)
    elif act == "kill":
        target.kill_pod(victim)
    else:
        target.pd_scale("prefill", 0)
        gone = scenario.wait_for(
            lambda: not target.prefill_pods(), cfg.scenario.recovery_s, "no prefill pod left"
        )
        if not gone:
            scenario.inconclusive(
                f"the prefill role still had pods {cfg.scenario.recovery_s:g} s after it was "
                "scaled to zero",
                stage="disruption",
            )
        scenario.hold(cfg.pd.zero_s, "the prefill role at zero")
        target.pd_scale("prefill", prefill_replicas)
    t_act = next(
        e.t
        for e in target.events()
        if e.kind == EventKind.ACTION and e.t >= before and e.detail.get("action") == ACTIONS[act]
    )

    # recovery: the prefill role's pods ready again, one made after the act (the victim
    # restarted in place, or a new pod) having served a prefill by its own engine's count;
    # then the decode role's, as ever
    def prefill_back() -> bool:
        pods = [p for p in target.prefill_pods() if p.ready and not p.terminating]
        fresh = [
            p
            for p in pods
            if (p.name == victim and p.restarts > restarts) or p.created_at > before - 1.0
        ]
        return len(pods) >= prefill_replicas and any(
            target.pod_metrics(p.name).get("vllm:request_success_total") for p in fresh
        )

    back = scenario.wait_for(
        prefill_back, cfg.scenario.recovery_s, f"{prefill_replicas} prefill pods ready and serving"
    )
    recovered_s = round(time.time() - t_act, 2) if back else None
    if act == "drain":  # gone, so that every prefill it held is in the Service's log
        scenario.wait_for(
            lambda: all(p.name != victim for p in target.prefill_pods()),
            cfg.pod.termination_grace_s + cfg.scenario.recovery_s,
            f"{victim} removed",
        )
    scenario.recovery.wait()
    scenario.cool_down()

    # the decode pods' view: the victim's prefills in flight at the act, and the failed
    # prefills the decode pods passed on or computed themselves
    lines = read_access_log(target.prefill_service_log())[0]
    at = address_spans(target.prefill_events())
    # the victim's prefills not ended at the act (a drain's endpoint goes a moment later,
    # and a prefill sent meanwhile waits on the victim too); the role's, at the act
    waiting = [
        g
        for g in lines
        if g.end_t >= t_act
        and (
            held_by(at, g.upstream_addr, g.end_t - g.request_time_s) == victim
            if act != "to_zero"
            else g.end_t - g.request_time_s <= t_act
        )
    ]
    scenario.extras["pd_prefill"] = result = {
        "act": act,
        "victim": victim,
        "prefill_recovered_s": recovered_s,
        "waiting": [
            {
                "request_id": g.request_id,
                "status": g.status,
                "upstream_status": g.upstream_status,
                "ended_s": round(g.end_t - t_act, 2),
            }
            for g in waiting
        ],
        "decode_view": decode_fallbacks(target.engine_logs().values()),
    }
    scenario.judge(checks.pd_prefill_waiting(result))
