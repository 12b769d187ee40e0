"""P/D rollout: a new version (new weights of the same shape) rolled across both roles of
a prefill/decode deployment under load, in the orders users roll them: the prefill
Deployment first, the decode Deployment first, or both at once (each with its own
strategy). Greedy golden prompts go through the gateway throughout.

Judged: every golden answer sent while the roles rolled is the old or the new version's
own (each version's answers asked of its own prefill/decode pair, through the gateway,
before and after the rollout); one that is neither was built from both (a decode engine
continuing another version's KV, which the P/D handshake lets through) and FAILs, with
the decode pod (the gateway's upstream) and the prefill pod (the decode pod's route) that
built it. The load's streams get the usual checks.
"""

import time

import pytest

from harness import canary, checks
from harness.gateway_logs import read_access_log
from harness.pd import GoldenLoop, classify, held_by, summarize
from harness.timeline import address_spans

ORDERS = {
    "prefill_first": (("prefill",), ("decode",)),
    "decode_first": (("decode",), ("prefill",)),
    "together": (("prefill", "decode"),),
}


@pytest.mark.pd_rollout
@pytest.mark.parametrize("order", ORDERS)
def test_pd_rollout(scenario, order):
    cfg, target = scenario.cfg.pd_rollout, scenario.target
    old, new = scenario.cfg.version, cfg.version or scenario.cfg.next_version
    scenario.preconditions.require("roll a prefill/decode deployment", target.pd_blocker())
    scenario.versions.require_candidate(
        new, cfg.engine, "pd_rollout.version" if cfg.version else ""
    )
    prompts = canary.load_prompts(cfg.prompts)

    loop = GoldenLoop(
        target.gateway_url,
        prompts,
        scenario.cfg.load.model,
        headers=target.auth_headers(),
        stall_timeout_s=scenario.cfg.slo.stall_timeout_s,
    )

    # steady state; the old version's answers from its own pair
    scenario.steady_state()
    before = loop.ask_each()
    loop.start()

    # act: each step's roles at once, each step once the one before has run its course
    t_act, finished = None, {}
    try:
        for roles in ORDERS[order]:
            acted = target.pd_rollout(roles, new, cfg.engine)
            t_act = t_act or acted.t
            for role in roles:
                done = scenario.wait_for(
                    lambda role=role: target.pd_rollout_done(role),
                    cfg.role_s,
                    f"the {role} role's rollout to {new}",
                )
                if not done:
                    scenario.inconclusive(
                        f"the {role} role's rollout to {new} did not finish within "
                        f"pd_rollout.role_s ({cfg.role_s:g} s)",
                        stage="disruption",
                    )
                finished[role] = round(time.time() - t_act, 2)
        scenario.hold(cfg.after_s, "golden prompts after the rollout")
    finally:
        answers = loop.stop(scenario.cfg.slo.stall_timeout_s + 5)
    after = loop.ask_each()  # the new version's answers from its own pair
    scenario.recovery.wait()
    scenario.cool_down()

    # each answer's decode pod (the gateway's upstream) and prefill pod (the decode's route)
    decode_at, prefill_at = address_spans(target.events()), address_spans(target.prefill_events())
    upstream = {g.request_id: g.upstream_addr for g in read_access_log(target.gateway_logs()[0])[0]}
    routes = target.pd_routes()
    for a in answers:
        a.decode_pod = held_by(decode_at, upstream.get(a.request_id), a.sent_at)
        remote, a.kv = routes.get(a.request_id, (None, None))
        a.prefill_pod = held_by(prefill_at, remote, a.sent_at) or remote
    broken = [
        f"{side}: {a.prompt_id} {a.outcome}"
        for side, asked in ((old, before), (new, after))
        for a in asked.values()
        if not a.ok
    ]
    golden = {
        v: {p: a.text for p, a in asked.items() if a.ok}
        for v, asked in ((old, before), (new, after))
    }
    classify(answers, golden[old], golden[new], (old, new))
    scenario.extras["pd_rollout"] = result = {
        "order": order,
        "versions": [old, new],
        "roles_finished_s": finished,
        "baseline_problem": (
            "the golden prompts through the gateway broke before or after the rollout ("
            + "; ".join(broken)
            + "): no version's own answer to hold the others to"
        )
        if broken
        else None,
        "summary": summarize(answers, t_act),
        "answers": [a.to_dict() | {"sent_s": round(a.sent_at - t_act, 2)} for a in answers],
    }
    scenario.judge(checks.pd_answers(result))
