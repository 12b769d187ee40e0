"""Checks: pure functions from RunData (harness/verdict.py) to one CheckResult each.

Every check names the population it judged and is inconclusive when that
population is empty or unknown. Pod attribution (through gateway logs) explains a
failure; it is never the reason a broken stream goes unjudged: without it, the
pod-scoped checks judge by count (every stream in flight at the disruption, the
victim's own engine metrics as the evidence that it held some of them).

Hints name the likely misconfiguration, from what the engines really do
(docs/facts.md: vLLM 0.32 measured at SIGTERM and during a drain).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence

from harness.client_delay import PERIOD_S
from harness.events import Event, EventKind
from harness.load_sizing import TARGET_CPU
from harness.podspec import window_s
from harness.streams import Outcome, StreamRecord
from harness.timeline import pod_lives, replicas_writer
from harness.verdict import (
    MAX_LISTED,
    OK_OUTCOMES,
    PHASES,
    Check,
    CheckResult,
    RunData,
    Status,
    failed,
    in_flight_at,
    inconclusive,
    judged,
    passed,
    skipped,
)

__all__ = [
    "BUSY_CPU",
    "adapter_answers",
    "adapter_unload_clean",
    "answered_not_killed",
    "ENGINE_CORE_ERROR",
    "PERIOD_MS",
    "SATURATED",
    "SHUTDOWN_500",
    "accounting",
    "broken",
    "canary_answers",
    "capacity_floor_for",
    "check_accounting",
    "check_all_complete",
    "check_ttft_slo",
    "client_kept_up",
    "engine_counts_agree",
    "gateway_clean",
    "goodput",
    "health_during_drain",
    "hint_for_outcomes",
    "in_flight_streams_finish",
    "itl_slo_budget",
    "killed_streams_fail_fast",
    "long_answer_finishes",
    "long_answer_survives_scale_down",
    "lost_node_routing",
    "no_abort_after_sigterm",
    "no_broken_streams",
    "no_hung_streams",
    "oom_killed_once",
    "other_pods_untouched",
    "pd_answers",
    "pd_prefill_waiting",
    "preemption_respects_pdb",
    "recovery_time",
    "rollout_duration_for",
    "saturated",
    "scaled_to_zero",
    "scaler_did_not_fight",
    "settle_client_kept_up",
    "shadow_candidate",
    "shadow_not_leaked",
    "shadow_served",
    "shared_checks",
    "slo_budget_for",
    "starts_without_restarts",
    "ttft_recovers_after_step",
    "ttft_slo_budget",
    "weighted_candidate",
    "weighted_split",
    "workers_advice",
]

ENGINE_CORE_ERROR = "EngineCore encountered an issue"
SHUTDOWN_500 = "cannot schedule new futures after shutdown"

# --- hints ---------------------------------------------------------------------------

# vLLM 0.32, measured (docs/facts.md, benchmarks/bench_engine_sigterm.py): at SIGTERM with
# its default --shutdown-timeout 0 every stream still open ends in one of three ways, and
# which one is a race; at the end of a drain shorter than the answers, in one of two
_SIGTERM_RACE = (
    "vLLM 0.32 with its default --shutdown-timeout 0 ends every stream still open at "
    "SIGTERM in one of three ways, a race: finish_reason abort + [DONE], the in-stream "
    "error 'EngineCore encountered an issue' + [DONE], or a hang (no more bytes, the socket "
    "held until the client gives up or SIGKILL); streams still open when a shorter drain "
    "ends get the error or the hang"
)
_DRAIN_FIX = (
    "Set the engine's --shutdown-timeout to about the p99 answer time and "
    "terminationGracePeriodSeconds above preStop + that timeout"
)

_HINTS = {
    Outcome.ABORTED: "streams ended with finish_reason abort + [DONE]: the engine aborted "
    f"them. {_SIGTERM_RACE}. {_DRAIN_FIX}",
    Outcome.TRUNCATED: "streams closed with neither finish_reason nor [DONE]: an engine older "
    "than vLLM v0.18 exits on SIGTERM without telling clients; upgrade, or drain with preStop",
    Outcome.MISSING_DONE: "a finish_reason arrived but no [DONE]: a proxy or the engine closed "
    "the stream early",
    Outcome.RESET: "connections broke mid-stream: the process was killed (SIGKILL at the grace "
    "deadline, OOM, crash) or the gateway cut the upstream; raise "
    "terminationGracePeriodSeconds above preStop + the engine's shutdown timeout",
    Outcome.HUNG: "streams stopped without an error and the client had to give up: an engine "
    f"that stopped without closing its streams, or a frozen one. {_SIGTERM_RACE}. "
    f"{_DRAIN_FIX}, and give clients a stall timeout",
    Outcome.ERROR_EVENT: "the engine sent an error object inside the stream (followed by [DONE]); "
    "a checker that only looks for [DONE] would call these successes",
    Outcome.HTTP_ERROR: "requests got a non-2xx status: no ready endpoint (503), the gateway "
    "could not reach an upstream (502/504), or admission refused them",
    Outcome.CONNECT_ERROR: "requests got no response: nothing listening, or the connection "
    "closed before headers",
    Outcome.NOT_SSE: "2xx responses that were not a parseable event stream",
}

_ENGINE_CORE_HINT = (
    "streams got the in-stream error 'EngineCore encountered an issue': the engine core "
    f"was stopped under them. {_SIGTERM_RACE}. {_DRAIN_FIX}"
)
_DRAIN_500_HINT = (
    "new requests reached an engine that was already draining and got HTTP 500 'cannot "
    "schedule new futures after shutdown' (vLLM refuses new work during its drain while "
    "/health stays 200): the gateway still routed to the pod after SIGTERM. Add a preStop "
    "sleep longer than the endpoint propagation delay (llm-d uses 15 s), and do not let a "
    "router choose replicas by polling /health"
)


def hint_for_outcomes(bad: Sequence[StreamRecord]) -> str:
    """The hint for the most common way these streams broke."""
    if any(ENGINE_CORE_ERROR in (r.error or "") for r in bad):
        return _ENGINE_CORE_HINT
    if any(r.status == 500 and SHUTDOWN_500 in (r.error or "") for r in bad):
        return _DRAIN_500_HINT
    counts: dict[str, int] = {}
    for r in bad:
        counts[r.outcome] = counts.get(r.outcome, 0) + 1
    worst = max(counts, key=counts.get)
    return _HINTS.get(Outcome(worst), worst)


def broken(records: Sequence[StreamRecord]) -> list[StreamRecord]:
    return [r for r in records if r.outcome not in OK_OUTCOMES]


# --- probe checks (rollcheck probe: no cluster, no phases) ------------------------------


def check_all_complete(records: Sequence[StreamRecord]) -> CheckResult:
    bad = broken(records)
    return judged(
        "all_streams_complete",
        records,
        bad,
        "streams",
        hint=hint_for_outcomes(bad) if bad else None,
        empty="no request was sent",
    )


def check_ttft_slo(records: Sequence[StreamRecord], slo_s: float | None) -> CheckResult:
    breaches = [r for r in records if "ttft_slo_breach" in r.flags]
    return judged(
        "ttft_slo",
        records,
        breaches,
        f"streams judged against TTFT {slo_s} s",
        hint="TTFT over the SLO: too few ready replicas for the load, or requests queued "
        "behind max_num_seqs",
        empty="no request was sent",
    )


def check_accounting(sent: int, records: Sequence[StreamRecord], outcome_total: int) -> CheckResult:
    """Nothing lost: requests sent = records written = outcomes counted."""
    ids = [r.request_id for r in records]
    dupes = len(ids) - len(set(ids))
    observed = {"sent": sent, "records": len(records), "outcomes": outcome_total, "dupes": dupes}
    expected = "sent = records = outcomes, no duplicate request ids"
    if not sent and not records:
        return inconclusive(
            "accounting", expected=expected, reason="no request was sent", observed=observed
        )
    if sent == len(records) == outcome_total and dupes == 0:
        return passed(
            "accounting", observed=observed, expected=expected, population=f"{sent} requests sent"
        )
    return failed(
        "accounting",
        observed=observed,
        expected=expected,
        population=f"{sent} requests sent",
        hint="records were lost or duplicated: a harness bug, please report it",
    )


# --- shared stream checks: every scenario runs these ----------------------------------


def accounting(d: RunData) -> CheckResult:
    result = check_accounting(d.sent, d.records, d.outcome_total or 0)
    if d.load_problems and result.status != Status.INCONCLUSIVE:
        result.status = Status.FAIL
        result.hint = "; ".join(d.load_problems)
    return result


def no_broken_streams(d: RunData) -> CheckResult:
    """Every stream of the run ended normally, traced to a pod or not."""
    bad = broken(d.records)
    return judged(
        "no_broken_streams",
        d.records,
        bad,
        "streams in the run",
        hint=hint_for_outcomes(bad) if bad else None,
        empty="no request was sent",
    )


def no_hung_streams(d: RunData) -> CheckResult:
    """No stream hung; except, after a node's loss, those it cut: a node that lost power
    sends no RST, so its streams can only hang until the client gives up (judged by
    lost_node_routing and the budgets, not here)."""
    lost = any(e.kind == EventKind.NODE_LOST for e in d.events)
    bad = [r for r in d.records if r.outcome == Outcome.HUNG and not (lost and d.struck(r))]
    return judged(
        "no_hung_streams",
        d.records,
        bad,
        "streams in the run" + (", less those in flight on the lost node" if lost else ""),
        hint=_HINTS[Outcome.HUNG],
        empty="no request was sent",
    )


_GATEWAY_BAD = (499, 502, 504)
_DEAD_POD_HINT = (
    "requests reached the killed pod after it was dead: the gateway still routed to it "
    "until its endpoint went (readiness period + endpoint propagation), and had no other "
    "upstream to retry on. Keep a second replica, and let the gateway retry a refused "
    "connect on another upstream (nginx proxy_next_upstream error)"
)


def _cut_by(d: RunData) -> str:
    """What cut the victims' streams, as the accounts name it: a kill, or a node's loss."""
    return "the node's loss" if any(e.kind == EventKind.NODE_LOST for e in d.events) else "the kill"


def gateway_clean(d: RunData) -> CheckResult:
    """No 499 / 502 / 504 at the gateway and no upstream that closed mid-response."""
    expected = {"499": 0, "502": 0, "504": 0, "upstream_prematurely_closed": 0}
    if d.gateway_logs is None:
        return skipped(
            "gateway_clean",
            expected=expected,
            reason="no gateway logs: set kube.gateway_log_files or kube.gateway_pods_selector to "
            "judge 499s, 502s and upstreams closed mid-response",
        )
    if not d.access:
        return inconclusive(
            "gateway_clean",
            expected=expected,
            reason=f"the gateway logs ({d.gateway_logs}) hold no line with this run's request ids"
            + (
                f"; first unparsed line: {d.first_unparsed_line!r}" if d.first_unparsed_line else ""
            ),
        )
    lines = d.access
    population = f"{len(lines)} gateway lines of this run"
    if d.expect_broken_on_victims:
        # pod_kill: the streams the kill cut may break at the gateway too (the ones that
        # reached the dead pod afterwards may not)
        theirs = {r.request_id for r in d.records if d.struck(r)}
        lines = [a for a in lines if a.request_id not in theirs]
        population += f", {len(d.access) - len(lines)} of them cut by {_cut_by(d)} left out"
    observed = {str(s): sum(a.status == s for a in lines) for s in _GATEWAY_BAD}
    premature = [a for a in lines if any("prematurely closed" in e for e in a.errors)]
    observed["upstream_prematurely_closed"] = len(premature)
    bad = [a for a in lines if a.status in _GATEWAY_BAD or a in premature]
    if not bad:
        return passed("gateway_clean", observed=observed, expected=expected, population=population)
    if d.expect_broken_on_victims and observed["502"] and not premature:
        hint = _DEAD_POD_HINT  # pod_kill: the streams the kill cut are left out already
    elif premature or observed["502"]:
        hint = (
            "the gateway saw upstreams die mid-response (502 / prematurely closed): pods were "
            "killed with streams open; raise terminationGracePeriodSeconds above preStop + the "
            "engine's shutdown timeout"
        )
    elif observed["499"]:
        hint = (
            "clients gave up before the gateway had response headers (499). vLLM sends headers "
            "before prefill, so behind vLLM this means the request waited on the gateway itself: "
            "an upstream that vanished (a pod gone before its endpoint was removed) or a "
            "connect queue"
        )
    else:
        hint = "the gateway timed out (504): proxy-read-timeout shorter than the longest silence"
    return failed(
        "gateway_clean",
        observed=observed,
        expected=expected,
        population=population,
        bad=[a.request_id for a in bad if a.request_id],
        hint=hint,
    )


# --- SLO budgets, per phase -------------------------------------------------------------


def _slo_figure(r: StreamRecord, kind: str) -> float:
    """What an SLO judges of a stream: its TTFT, or its longest inter-token gap; no first
    token at all counts as the worst."""
    value = r.ttft_s if kind == "ttft" else r.itl_max_s
    return float("inf") if value is None else value


def _breached(r: StreamRecord, kind: str, slo_s: float) -> bool:
    if kind == "ttft":
        # no first token at all (an error, a hang) is a breach too
        return r.ttft_s is None or r.ttft_s > slo_s
    return r.itl_max_s is not None and r.itl_max_s > slo_s


def _slo_population(d: RunData) -> list[StreamRecord]:
    # a stream the harness itself cut at the end before its first token says nothing
    return [r for r in d.records if not (r.outcome == Outcome.CANCELLED and r.ttft_s is None)]


def _slo_phases(d: RunData, kind: str, slo_s: float) -> dict[str, list]:
    """Requests by the phase their SLO was judged in: when they were sent, except a
    request that never got its first token, whose breach happens when it ended (or when
    its SLO ran out, if earlier). A stream sent just before a pod kill and cut before its
    first token is the disruption's doing, not a breach before it."""

    def when(r: StreamRecord) -> float:
        if kind == "ttft" and r.ttft_s is None:
            return min(r.ended_at, r.sent_at + slo_s)
        return d.counted_at(r)

    return d.by_phase(_slo_population(d), when)


def _cut_by_the_kill(d: RunData, slo_s: float) -> set[str]:
    """pod_kill: the killed pod's own streams that the kill cut before their first token,
    while their SLO still ran. The kill broke them, not a slow first token:
    killed_streams_fail_fast judges them, and gateway_clean leaves their lines out too.
    One that had waited out its SLO before the kill is still a breach."""
    if not d.expect_broken_on_victims or d.t_act is None:
        return set()
    return {
        r.request_id
        for r in d.records
        if d.struck(r)
        and r.ttft_s is None
        and r.outcome not in OK_OUTCOMES
        and r.sent_at + slo_s > d.t_act
    }


def slo_budget_for(
    kind: str, required: tuple[str, ...] = ("during",), judged_phases: tuple[str, ...] = PHASES
) -> Callable:
    """The share of requests over the TTFT (or ITL) SLO, per phase, within its budget.

    `required`: the phases that must hold requests for the check to count as evidence
    (the disruption's own phase by default). `judged_phases`: the phases held to a
    budget (scale_up judges its step by how long TTFT takes to recover instead).
    """

    def check(d: RunData) -> CheckResult:
        name = f"{kind}_slo_budget"
        slo_s = d.ttft_slo_s if kind == "ttft" else d.itl_slo_s
        budgets = d.slo_budgets.get(kind) or {}
        if slo_s is None:  # (no "over None s" in the report)
            return skipped(name, expected="an SLO to judge by", reason=f"slo.{kind}_s is not set")
        expected = {p: f"<= {budgets.get(p, 0):.0%} over {slo_s} s" for p in PHASES}
        by_phase = _slo_phases(d, kind, slo_s)
        cut = _cut_by_the_kill(d, slo_s) if kind == "ttft" else set()
        if cut:
            by_phase = {p: [r for r in rs if r.request_id not in cut] for p, rs in by_phase.items()}
        left_out = f", {len(cut)} on the killed pod cut before their first token left out"
        left_out = left_out if cut else ""
        observed, bad, broke, judged_n = {}, [], [], 0
        lagged, blurred = d.client_lagged(judged_phases), []
        for p in PHASES:
            recs = by_phase[p]
            if p not in judged_phases:
                observed[p] = f"{len(recs)} requests, not held to a budget"
                continue
            if not recs:
                observed[p] = "no requests"
                continue
            over = [r for r in recs if _breached(r, kind, slo_s)]
            share = len(over) / len(recs)
            judged_n += len(recs)
            observed[p] = f"{len(over)} of {len(recs)} ({share:.1%})"
            budget = budgets.get(p, 0.0)
            if p in lagged:
                # a saturated client: its delay is in every figure. TTFT (a few reads) is
                # late by at most its worst lateness, so a request over the SLO by more is
                # the engine's breach. A gap between tokens has no such bound: a client
                # that reads late holds the engine back too (TCP backpressure), so an ITL
                # budget broken there is not judged, and one held is held only with the
                # margin (a gap can read short by as much)
                margin = max(lagged[p]["p99_s"], lagged[p]["max_s"])
                if kind == "ttft":
                    over = [r for r in over if _slo_figure(r, kind) > slo_s + margin]
                    observed[p] += f", {len(over)} by more than the client's delay ({_ms(margin)})"
                    if len(over) / len(recs) <= budget < share:
                        blurred.append(p)
                    share = len(over) / len(recs)
                else:
                    near = [r for r in recs if _breached(r, kind, max(0.0, slo_s - margin))]
                    if len(near) / len(recs) > budget:
                        blurred.append(p)
                        observed[p] += ", not judged: the client lagged"
                    continue
            if share > budget:
                worst = sorted(over, key=lambda r: -_slo_figure(r, kind))
                bad += worst
                broke.append(_window(p, over, d))
        empty = [p for p in required if not by_phase[p]]
        if broke:
            pods = sorted({r.pod for r in bad if r.pod})
            hint = _slo_hint(kind, d)
            if blurred:
                hint += f" (not judged in {' and '.join(blurred)}: {saturated(lagged, d)})"
            where = "; ".join(broke)
            if pods:
                where += f"; served by {', '.join(pods[:5])}"
            population = f"{judged_n} requests{left_out}"
            return failed(
                name,
                observed=observed,
                expected=expected,
                population=population,
                bad=bad,
                hint=f"{where}. {hint}",
            )
        if blurred:
            return inconclusive(
                name,
                expected=expected,
                reason=f"over budget in {' and '.join(blurred)}, but {saturated(lagged, d)}",
                observed=observed,
            )
        if not judged_n or empty:
            return inconclusive(
                name,
                expected=expected,
                reason=f"no request was sent in the {' or '.join(empty) or 'scenario'} phase",
                observed=observed,
            )
        return passed(
            name,
            observed=observed,
            expected=expected,
            population=f"{judged_n} requests in {', '.join(judged_phases)}{left_out}",
        )

    check.__name__ = f"{kind}_slo_budget"
    return check


def _window(phase: str, over: list[StreamRecord], d: RunData) -> str:
    t0 = d.t_act or min(r.sent_at for r in over)
    first, last = min(r.sent_at for r in over), max(r.sent_at for r in over)
    return f"budget broken {phase} the disruption, {first - t0:+.1f} s .. {last - t0:+.1f} s"


def _slo_hint(kind: str, d: RunData) -> str:
    acts = {e.detail.get("action") for e in d.events if e.kind == EventKind.ACTION}
    if kind == "itl":
        return (
            "gaps between tokens over the SLO: decode batches too large for the replicas left "
            "(max_num_seqs), or preemption under KV-cache pressure"
        )
    if "rollout" in acts:
        return (
            "TTFT over its budget during the rollout: capacity fell below what the load needs "
            "(maxUnavailable > 0, or a surge pod Pending on a full GPU pool while old pods "
            "drain); surge with spare GPUs, or roll out at a quieter time"
        )
    if {"evict", "drain_node"} & acts:
        return (
            "TTFT over its budget during the drain: the remaining replicas queued the drained "
            "pod's load (requests wait behind max_num_seqs); keep a spare replica "
            "(PDB minAvailable above the load's need)"
        )
    if {"kill", "delete", "oom_request"} & acts:
        return (
            "TTFT over its budget after a pod was lost: the surviving replicas queued its load "
            "until the replacement was ready (start-up time); keep a spare replica for the "
            "load, and cut start-up time"
        )
    if {"autoscaler", "load_step", "scale"} & acts:
        return (
            "TTFT over its budget while replicas were scaled: a cold start (weights loading) "
            "after scale-from-zero or a load step; keep a warm minimum, or scale earlier on "
            "queue length"
        )
    return "TTFT over its budget: too few ready replicas for the load"


ttft_slo_budget = slo_budget_for("ttft")
itl_slo_budget = slo_budget_for("itl")


def goodput(d: RunData) -> dict:
    """Per phase: the share of requests that completed within their SLOs."""
    out = {}
    by_phase = _slo_phases(d, "ttft", d.ttft_slo_s)  # the phases the TTFT budget judges
    everyone = [r for p in PHASES for r in by_phase[p]]
    for p, recs in [*by_phase.items(), ("all", everyone)]:
        good = [
            r
            for r in recs
            if r.outcome == Outcome.COMPLETE
            and not _breached(r, "ttft", d.ttft_slo_s)
            and (d.itl_slo_s is None or not _breached(r, "itl", d.itl_slo_s))
        ]
        out[p] = {"good": len(good), "requests": len(recs)} | (
            {"share": round(len(good) / len(recs), 4)} if recs else {"share": None}
        )
    return out


# --- pod-scoped checks ---------------------------------------------------------------


def _victim_times(d: RunData, kinds: tuple[str, ...]) -> dict[str, float]:
    """Each victim's own moment of disruption (its SIGTERM, its eviction), or the act."""
    out = {}
    for v in d.victims:
        t = d.victim_time(v, kinds)
        if t is None:
            t = d.t_act
        if t is not None:
            out[v] = t
    return out


def _in_flight_on_victims(d: RunData):
    """Streams in flight at a victim's SIGTERM: sent before it and ended after it (a stream
    that ended during preStop met no SIGTERM, and is no evidence of the drain): (traced
    to the victim, untraced, each victim's SIGTERM time)."""
    times = _victim_times(d, ("sigterm", "terminating"))
    traced: dict[str, StreamRecord] = {}
    untraced: dict[str, StreamRecord] = {}
    for v, t in times.items():
        for r in d.records:
            if not (r.sent_at <= t < r.ended_at):
                continue
            if r.pod == v:
                traced[r.request_id] = r
            elif r.pod is None:
                untraced[r.request_id] = r
    return list(traced.values()), list(untraced.values()), times


def _by_pod(records: Sequence[StreamRecord]) -> str:
    counts: dict[str, int] = {}
    for r in records:
        counts[r.pod or "?"] = counts.get(r.pod or "?", 0) + 1
    return ", ".join(f"{n} on {p}" for p, n in sorted(counts.items()))


def in_flight_streams_finish(d: RunData) -> CheckResult:
    """Streams in flight on each disturbed pod at its SIGTERM end normally."""
    name, expected = "in_flight_streams_finish", "every one ends normally"
    if not d.victims:
        return inconclusive(
            name, expected=expected, reason="no pod was named as the disruption's target"
        )
    traced, untraced, times = _in_flight_on_victims(d)
    if not times:
        return inconclusive(
            name, expected=expected, reason="the disruption was never observed on the victim"
        )
    hint_of = lambda bad: hint_for_outcomes(bad) if bad else None  # noqa: E731
    bad = broken(traced) + broken(untraced)
    victims = ", ".join(d.victims)
    metric = sum(d.victim_in_flight.get(v, 0) for v in d.victims)
    estimated = any(
        e.kind == EventKind.SIGTERM and e.pod in d.victims and e.detail.get("estimated")
        for e in d.events
    )
    at = "SIGTERM (estimated from preStop)" if estimated else "SIGTERM"
    if traced:
        population = f"streams in flight at {at}: {_by_pod(traced)}"
        if untraced:
            population += f", and {len(untraced)} untraced streams in flight then"
        judged_recs = traced + untraced
        return judged(name, judged_recs, bad, population, hint=hint_of(bad))
    if untraced and metric:
        # Judged by count: the victim held `metric` streams by its engine's metrics; every
        # untraced stream in flight at its SIGTERM is a superset of them.
        population = (
            f"untraced streams in flight at the SIGTERM of {victims} (judged by count: its "
            f"engine reported {metric} running just before the disruption)"
        )
        return judged(name, untraced, bad, population, hint=hint_of(bad))
    if bad:
        return failed(
            name,
            observed=f"{len(bad)} broken",
            expected=expected,
            population="untraced streams",
            bad=bad,
            hint=hint_of(bad),
        )
    if d.any_traced and not untraced:
        deleted = {v: d.victim_time(v, ("terminating",)) for v in times}
        ended_first = [
            r
            for r in d.records
            if deleted.get(r.pod) is not None
            and r.sent_at <= deleted[r.pod] < r.ended_at <= times[r.pod]
        ]
        if ended_first:
            return inconclusive(
                name,
                expected=expected,
                reason=f"no stream was in flight on {victims} at its {at}: the {len(ended_first)} in "
                "flight at the eviction ended during preStop, before SIGTERM could touch "
                "them; raise load.max_tokens so that answers outlast pod.prestop_s",
            )
        return inconclusive(
            name, expected=expected, reason=f"no stream was in flight on {victims} at its {at}"
        )
    return inconclusive(
        name,
        expected=expected,
        reason="streams could not be attributed to pods (no gateway logs) and the victim's engine "
        f"metrics showed no stream running on {victims} before the disruption",
    )


def no_abort_after_sigterm(d: RunData) -> CheckResult:
    """No request sent while a victim drained (SIGTERM .. exit) was aborted or refused."""
    name, expected = "no_abort_after_sigterm", "every one ends normally"
    sigterms = {v: d.victim_time(v, ("sigterm",)) for v in d.victims}
    sigterms = {v: t for v, t in sigterms.items() if t is not None}
    if not sigterms:
        return inconclusive(name, expected=expected, reason="no SIGTERM was observed on the victim")
    windows = {}
    for v, t in sigterms.items():
        end = d.victim_time(v, ("exited", "pod_removed")) or d.t_end or t
        windows[v] = (t, max(t, end))
    sent_while = [
        r
        for r in d.records
        if any(t <= r.sent_at <= end for t, end in windows.values())
        and (r.pod is None or r.pod in windows)
    ]
    reached = [r for r in d.records if r.pod in sigterms and r.sent_at >= sigterms[r.pod]]
    population = {r.request_id: r for r in sent_while + reached}
    recs = list(population.values())
    bad = broken(recs)
    traced_n = sum(r.pod is not None for r in recs)
    desc = (
        f"requests sent while {', '.join(sigterms)} drained, {len(reached)} of them traced to it"
        if traced_n
        else f"untraced requests sent while {', '.join(sigterms)} drained (judged by time)"
    )
    hint = (
        hint_for_outcomes(bad)
        if any(r.status == 500 for r in bad)
        else "requests reached pods after SIGTERM because the gateway had not yet dropped them; "
        "a draining engine refuses or aborts them. Add a preStop sleep longer than the "
        "endpoint propagation delay (llm-d uses 15 s)"
    )
    # Requests sent during the drain that provably went elsewhere are the good evidence.
    others = [
        r
        for r in d.records
        if r.pod is not None
        and r.pod not in windows
        and any(t <= r.sent_at <= end for t, end in windows.values())
    ]
    if not recs and others:
        return passed(
            name,
            observed=f"0 of {len(others)} reached a draining pod",
            expected=expected,
            population=f"{len(others)} requests sent while {', '.join(sigterms)} drained, all served "
            "elsewhere",
        )
    return judged(
        name,
        recs,
        bad,
        desc,
        hint=hint if bad else None,
        empty=f"no request was sent while {', '.join(sigterms)} drained",
    )


def killed_streams_fail_fast(d: RunData) -> CheckResult:
    """Streams on a killed pod end with an error within the stall timeout, never hang."""
    name = "killed_streams_fail_fast"
    expected = f"each ends within {d.stall_timeout_s + 1:g} s of the kill, none hung"
    if not d.victims or d.t_act is None:
        return inconclusive(name, expected=expected, reason="no pod was killed")
    hint = (
        "streams on the killed pod did not fail fast: the client waited for data that never came. "
        "Make the gateway's proxy_read_timeout shorter than clients' patience, or send SSE "
        "keep-alives and let clients time out on missing tokens"
    )

    def slow(r: StreamRecord) -> bool:
        return r.outcome == Outcome.HUNG or (
            r.outcome not in OK_OUTCOMES and r.ended_at - d.t_act > d.stall_timeout_s + 1
        )

    traced = [r for r in d.records if d.struck(r)]
    if traced:
        return judged(
            name,
            traced,
            [r for r in traced if slow(r)],
            "streams on the killed pod, in flight from the kill until it was seen dead",
            hint=hint,
        )
    metric = sum(d.victim_in_flight.get(v, 0) for v in d.victims)
    if d.any_traced or not metric:
        why = (
            f"no stream was in flight on {', '.join(d.victims)} at the kill"
            if d.any_traced
            else "streams could not be attributed to pods and the victim's engine metrics "
            "showed no stream running before the kill"
        )
        return inconclusive(name, expected=expected, reason=why)
    # By count: the streams that broke at the kill are the victim's.
    killed = broken(in_flight_at(d.records, d.t_act))
    bad = [r for r in killed if slow(r)]
    population = (
        f"{len(killed)} untraced streams broken at the kill (judged by count: the victim ran "
        f"{metric} just before it)"
    )
    if not killed:
        return inconclusive(
            name,
            expected=expected,
            reason=f"the victim ran {metric} streams, but none of this run broke at the kill",
        )
    if bad:
        return failed(
            name,
            observed=f"{len(bad)} of {len(killed)} slow",
            expected=expected,
            population=population,
            bad=bad,
            hint=hint,
        )
    return passed(
        name, observed=f"0 of {len(killed)} slow", expected=expected, population=population
    )


def oom_killed_once(d: RunData) -> CheckResult:
    """oom_kill: the act's request ended the victim's engine with OOMKilled (the kill
    confirmed by the container's own reason), and nothing was OOMKilled after it: a
    restarted engine killed again, or another replica, means the load itself crosses
    the memory limit, a crash loop no single request explains."""
    name = "oom_killed_once"
    expected = "one OOMKill (the act's request), none after it"
    if not d.victims or d.t_act is None:
        return inconclusive(name, expected=expected, reason="no request was sent to exhaust memory")
    since = d.t_start if d.t_start is not None else d.t_act  # the load's, before the act too
    exits = [e for e in d.events if e.kind == EventKind.EXITED and e.t >= since]
    ooms = [e for e in exits if e.detail.get("reason") == "OOMKilled"]
    first = next((e for e in ooms if e.pod in d.victims and e.t >= d.t_act), None)
    if first is None:
        other = next((e for e in exits if e.pod in d.victims), None)
        answer = next(
            (
                e
                for e in d.events
                if e.kind == EventKind.ACTION and e.detail.get("action") == "oom_answer"
            ),
            None,
        )
        status = answer.detail.get("status") if answer is not None else None
        if other is not None:
            why = f"{other.pod}'s engine exited with code {other.detail.get('code')}, not OOMKilled"
        elif status == 400:
            why = (
                "the engine refused the request (HTTP 400): a context of that size is above "
                "its max_model_len; oom_kill needs a request the engine accepts and its "
                "memory limit cannot hold (a real engine's KV cache on a GPU does not grow "
                "in host memory)"
            )
        elif isinstance(status, int) and status >= 400:
            why = f"the request did not reach the engine's decoding (HTTP {status})"
        else:
            why = (
                f"{', '.join(d.victims)} held the request: its memory limit is above what "
                "scenario.oom_context_tokens asks (raise it)"
            )
        return inconclusive(name, expected=expected, reason=why)
    code = first.detail.get("code")
    restarts = first.detail.get("restarts")
    observed = f"OOMKilled {first.pod} at {first.t - d.t_act:+.2f} s (exit {code}"
    observed += f", restarts {restarts})" if restarts is not None else ")"
    later = [e for e in ooms if e is not first]
    population = f"{len(exits)} engine exits while the load ran"
    poisoned = _retried_kills(d, first.pod, later)
    by_load = [e for e in later if e not in poisoned]
    answered = _retries_answered(d)
    if answered:
        observed += f"; {answered}"
    if poisoned:
        retries = sum(1 for a in _acts(d, "oom_request") if a.detail.get("retry"))
        back_offs = [
            e.detail["delay_s"] for e in d.events
            if e.kind == EventKind.BACK_OFF and e.pod == first.pod and e.t >= d.t_act
            and isinstance(e.detail.get("delay_s"), int | float)
        ]  # fmt: skip
        waits = f", back-off {', '.join(f'{b:g} s' for b in back_offs)}" if back_offs else ""
        last = poisoned[-1].detail.get("restarts")
        loop = (
            f"{observed}; the same request, sent {retries} times more as a client retries "
            f"one that got no answer, OOMKilled the restarted engine {len(poisoned)} more "
            f"times (restarts {last if last is not None else '?'}{waits}): a crash loop "
            "caused by one request"
        )
        if by_load:
            loop += f"; and {len(by_load)} more OOMKills under the load"
        return failed(
            name,
            observed=loop,
            expected=expected,
            population=population,
            hint="the engine admits a request its memory cannot hold, and every retry of it "
            "kills the engine it reaches: cap what it admits (max_model_len below what "
            "resources.limits.memory holds, so such a request is refused with 400; a GPU "
            "engine's KV cache is sized at start and queues or refuses instead), and let "
            "clients retry a request whose engine died at most once, with back-off",
        )
    if by_load:
        pods = ", ".join(dict.fromkeys(e.pod for e in by_load))
        return failed(
            name,
            observed=f"{observed}; and {len(by_load)} more OOMKills under the load ({pods})",
            expected=expected,
            population=population,
            hint="the load alone crosses the containers' memory limit, so the replacements "
            "are killed again (a crash loop): raise resources.limits.memory above the "
            "engine's working set at this load, or cap what it admits (max_num_seqs, "
            "max_model_len) so that it refuses what it cannot hold",
        )
    return passed(name, observed=observed, expected=expected, population=population)


def _acts(d: RunData, action: str) -> list[Event]:
    return [e for e in d.events if e.kind == EventKind.ACTION and e.detail.get("action") == action]


def _retried_kills(d: RunData, pod: str, ooms: list[Event]) -> list[Event]:
    """The OOMKills of `pod` that each came after a retry of the act's request and before
    the next one: the request's own, not the load's. (A cluster's watch reports the exit
    about a second after the retry's answer was cut.)"""
    sent = sorted((a for a in _acts(d, "oom_request") if a.pod == pod), key=lambda a: a.t)
    out = []
    for i, req in enumerate(sent):
        after = sent[i + 1] if i + 1 < len(sent) else None
        if not req.detail.get("retry"):
            continue
        hit = next(
            (e for e in ooms if e.pod == pod and e.t >= req.t and (after is None or e.t < after.t)),
            None,
        )  # fmt: skip
        if hit is not None:
            out.append(hit)
    return out


def answered_not_killed(answer: dict) -> bool:
    """An oom_answer's detail: the engine answered the request (refused it, or served it
    whole) rather than dying of it (its stream cut)."""
    return answer.get("outcome") == "complete" or (answer.get("status") or 0) >= 400


def _retries_answered(d: RunData) -> str:
    """How the retries of the act's request that were answered ended ("" for none)."""
    answers = [a for a in _acts(d, "oom_answer") if a.detail.get("retry")]
    said = [
        f"retry {a.detail['retry']} answered HTTP {a.detail.get('status')} "
        f"({a.detail.get('outcome')})"
        for a in answers
        if answered_not_killed(a.detail)
    ]
    return "; ".join(said)


def lost_node_routing(d: RunData) -> CheckResult:
    """node_loss: how long the gateway went on sending new requests to the lost node's pods.
    A node that lost power answers nothing, so a request routed to it waits for a
    connection that never comes (nginx's connect timeout, 60 s by default) before a retry
    elsewhere, or hangs: until the node controller marks the node (40-50 s) and the
    endpoints go, unless the gateway stops sooner (a short connect timeout with a retry on
    another upstream, passive health checks, outlier detection). Every upstream the
    gateway tried is read from its log (nginx lists each retry)."""
    name = "lost_node_routing"
    expected = f"none later than +{d.lost_node_routing_s:g} s after the loss"
    act = next(
        (
            e
            for e in d.events
            if e.kind == EventKind.ACTION and e.detail.get("action") == "node_loss"
        ),
        None,
    )
    if act is None or d.t_act is None:
        return inconclusive(name, expected=expected, reason="no node was lost")
    node = act.node or act.detail.get("node")
    lost = set(act.detail.get("pods") or [])
    addresses = {
        e.detail["address"] for e in d.events
        if e.kind == EventKind.POD_CREATED and e.pod in lost and e.detail.get("address")
    }  # fmt: skip
    if d.gateway_logs is None or not d.access:
        return inconclusive(
            name,
            expected=expected,
            reason="no gateway log: the upstreams a request was sent to cannot be told "
            "(give kube.gateway_log_files or kube.gateway_pods_selector)",
        )
    if not addresses:
        return inconclusive(name, expected=expected, reason=f"no address of {node}'s pods was seen")
    after = [
        ln for ln in d.access
        if ln.start_t >= act.t and set(ln.tried or [ln.upstream_addr]) & addresses
    ]  # fmt: skip
    removed = [
        e.t - act.t for e in d.events if e.kind == EventKind.ENDPOINT_REMOVED and e.pod in lost and e.t >= act.t
    ]  # fmt: skip
    gone = f"; its endpoints removed at +{max(removed):.1f} s" if removed else ""
    population = f"{sum(1 for ln in d.access if ln.start_t >= act.t)} gateway lines after the loss"
    if not after:
        return passed(
            name, observed=f"no request sent to {node}'s pods after the loss{gone}",
            expected=expected, population=population,
        )  # fmt: skip
    last = max(ln.start_t for ln in after) - act.t
    answered = sum(1 for ln in after if ln.status < 400 and ln.upstream_addr not in addresses)
    observed = (
        f"{len(after)} requests sent to {node}'s pods after the loss, the last at "
        f"+{last:.1f} s ({answered} then answered from another upstream){gone}"
    )
    if last <= d.lost_node_routing_s:
        return passed(name, observed=observed, expected=expected, population=population)
    return failed(
        name,
        observed=observed,
        expected=expected,
        population=population,
        hint="the gateway kept sending requests to a node that answers nothing until the "
        "node controller marked it (node-monitor-grace-period, 40-50 s): give it a short "
        "connect timeout and a retry on another upstream (nginx proxy_connect_timeout 1-2 s "
        "with proxy_next_upstream error timeout; ingress-nginx proxy-connect-timeout), "
        "passive health checks or outlier detection, and let clients retry a request that "
        "got no first byte",
    )


def _capacity_lost(d: RunData, since: float) -> str:
    """How the ready replicas fell below the count before `since` and for how long, from
    the target's capacity events ("" when they never fell)."""
    caps = [e for e in d.events if e.kind == EventKind.CAPACITY]
    before = [e for e in caps if e.t < since]
    full = before[-1].detail.get("ready") if before else None
    if full is None:
        return ""
    low, t_low, t_back = full, None, None
    for e in caps:
        if e.t < since:
            continue
        ready = e.detail.get("ready", full)
        if ready < full and t_low is None:
            t_low = e.t
        low = min(low, ready)
        if t_low is not None and ready >= full:
            t_back = e.t
            break
    if t_low is None:
        return ""
    lost = f"{full - low} of {full} replicas lost"
    if t_back is None:
        return f"{lost} from {t_low - since:+.2f} s, not back by the end"
    return f"{lost} for {t_back - t_low:.1f} s (from {t_low - since:+.2f} s)"


def preemption_respects_pdb(d: RunData) -> CheckResult:
    """preemption: the scheduler preempted the engine's pods only as far as their
    PodDisruptionBudget allowed at the act. A PDB does not stop a preemption (Kubernetes
    respects it only where another victim exists): an engine that a PDB protects from
    drains can still lose more replicas to a higher-priority pod than the budget allows.
    Also says what capacity the preemption took and for how long."""
    name, expected = "preemption_respects_pdb", "no more pods preempted than the PDB allowed"
    act = next(
        (e for e in d.events if e.kind == EventKind.ACTION and e.detail.get("action") == "preempt"),
        None,
    )
    if act is None:
        return inconclusive(name, expected=expected, reason="no preemption was made")
    population = "the engine's pods at the act"
    victims = sorted(
        {e.pod for e in d.events if e.kind == EventKind.PREEMPTED and e.t >= act.t - 1.0}
    )
    if not victims:
        return inconclusive(
            name, expected=expected, reason="the target showed no pod preempted by the scheduler"
        )
    lost = _capacity_lost(d, act.t)
    tail = f"; {lost}" if lost else ""
    pdb, allowed = act.detail.get("pdb"), act.detail.get("pdb_allowed")
    observed = f"{len(victims)} preempted ({', '.join(victims)})"
    if pdb is None:
        why = (
            "its PodDisruptionBudgets could not be read"
            if act.detail.get("pdb_unreadable")
            else "no PodDisruptionBudget selects the engine's pods"
        )
        return passed(
            name, observed=f"{observed}; {why}{tail}", expected=expected, population=population
        )
    observed += f"; PodDisruptionBudget {pdb} allowed {allowed}{tail}"
    if len(victims) <= allowed:
        return passed(name, observed=observed, expected=expected, population=population)
    return failed(
        name,
        observed=observed,
        expected=expected,
        population=population,
        hint="the scheduler preempts past a PodDisruptionBudget when no other victim frees "
        "what the higher-priority pod asks for: give the engine pods a PriorityClass above "
        "the preemptible work that shares their nodes, or run more replicas than the PDB's "
        "minAvailable so that one preemption stays within it",
    )


def other_pods_untouched(d: RunData) -> CheckResult:
    """pod_kill: only the streams the kill cut break (by pod, or by count without traces):
    a request that reached the dead pod after it was seen dead is judged too."""
    name = "other_pods_untouched"
    others = [r for r in d.records if r.pod is not None and not d.struck(r)]
    bad = broken(others)
    untraced_bad = broken(d.untraced(d.records))
    metric = sum(d.victim_in_flight.get(v, 0) for v in d.victims)
    if len(untraced_bad) > metric:
        # untraced broken streams can be the victim's own, up to what it was running
        return failed(
            name,
            observed=f"{len(untraced_bad)} untraced broken streams",
            expected=f"<= {metric} (the victim's streams by its engine metrics)",
            population=f"{len(d.records)} streams, judged by count",
            bad=untraced_bad,
            hint="more streams broke than the killed pod was running: "
            + hint_for_outcomes(untraced_bad),
        )
    if others:
        hint = None
        if any(r.pod in d.victims for r in bad):
            hint = _DEAD_POD_HINT
        elif bad:
            hint = "streams on pods that were not disturbed broke: " + hint_for_outcomes(bad)
        return judged(name, others, bad, f"streams {_cut_by(d)} did not cut", hint=hint)
    if metric and not d.any_traced:
        return passed(
            name,
            observed=f"{len(untraced_bad)} broken",
            expected=f"<= {metric}",
            population=f"{len(d.records)} untraced streams, judged by count (the victim ran {metric})",
        )
    return inconclusive(
        name, expected="0 broken", reason="no stream could be traced to a pod other than the victim"
    )


# --- cluster-scoped checks ----------------------------------------------------------------


def capacity_floor_for(max_unavailable: int) -> Callable[[RunData], CheckResult]:
    """Available replicas never below replicas - maxUnavailable during the disruption."""

    def capacity_floor(d: RunData) -> CheckResult:
        floor = d.replicas - max_unavailable
        caps = [
            e.detail
            for e in d.events
            if e.kind == EventKind.CAPACITY
            and d.t_act is not None
            and e.t >= d.t_act
            and (d.t_recovered is None or e.t <= d.t_recovered)
        ]
        if not caps:
            return inconclusive(
                "capacity_floor",
                expected=f">= {floor}",
                reason="no capacity events were observed during the disruption",
            )
        lowest = min(c["available"] for c in caps)
        population = f"{len(caps)} capacity changes during the disruption"
        if lowest >= floor:
            return passed(
                "capacity_floor", observed=lowest, expected=f">= {floor}", population=population
            )
        return failed(
            "capacity_floor",
            observed=lowest,
            expected=f">= {floor}",
            population=population,
            hint="capacity fell below the rollout's floor: lower maxUnavailable, or raise "
            "maxSurge where spare GPUs exist",
        )

    return capacity_floor


def recovery_time(d: RunData) -> CheckResult:
    expected = f"<= {d.recovery_budget_s} s"
    if d.t_act is None:
        return inconclusive("recovery_time", expected=expected, reason="no disruption was recorded")
    if d.t_recovered is None:
        why = [
            e.detail["why"]
            for e in d.events
            if e.kind == EventKind.ACTION and e.detail.get("action") == "not_recovered"
        ]
        return failed(
            "recovery_time",
            observed="did not recover",
            expected=expected,
            population="the target's replicas",
            hint=why[-1] if why else "the target never returned to its desired ready replicas",
        )
    took = round(d.t_recovered - d.t_act, 2)
    population = "the target's replicas"
    acts = {e.detail.get("action"): e for e in d.events if e.kind == EventKind.ACTION}
    if "preemptor_gone" in acts:  # preemption: capacity comes back once the preemptor leaves
        gone = acts["preemptor_gone"]
        took = round(d.t_recovered - gone.t, 2)
        population = (
            f"from the preemptor leaving (at {gone.t - d.t_act:+.2f} s) to the desired "
            "replicas ready and served"
        )
    if "kill_seen" in acts and "replacement_served" in acts:
        seen, served = acts["kill_seen"], acts["replacement_served"]
        population = (
            f"from the kill to a replacement serving: the engine seen dead "
            f"({seen.detail.get('evidence')}) at {seen.t - d.t_act:+.2f} s, {served.pod} "
            f"ready and served a complete stream at {served.t - d.t_act:+.2f} s"
        )
    if took <= d.recovery_budget_s:
        return passed(
            "recovery_time", observed=f"{took} s", expected=expected, population=population
        )
    return failed(
        "recovery_time",
        observed=f"{took} s",
        expected=expected,
        population=population,
        hint="recovery took too long: engine start time (weight loading) multiplies into every "
        "replacement; check the startupProbe and image/weight caching",
    )


def _long_answers(d: RunData, name: str, at: float | None, when: str, hint: str) -> CheckResult:
    """The long answers in flight when the scaler took over, judged by whether they were
    still decoding at `at` (when the scaler did, or could, act): one that broke fails;
    one that ended normally before then never met the scaler, and is no evidence."""
    expected = f"0 broken, still decoding when {when}"
    longs = [r for r in d.records if r.tags.get("user") == "long"]
    taken_over = in_flight_at(longs, d.t_act) if d.t_act is not None else []
    if not taken_over:
        return inconclusive(
            name,
            expected=expected,
            reason="no long answer was in flight when the scaler took over: raise load.long_answer_tokens",
        )
    bad = broken(taken_over)
    if at is None:
        if bad:
            return failed(
                name,
                observed=f"{len(bad)} broken",
                expected=expected,
                population="long answers",
                bad=bad,
                hint=hint,
            )
        return inconclusive(
            name, expected=expected, reason=f"the target never showed the scaler act ({when})"
        )
    met = [r for r in taken_over if r.ended_at > at or r in bad]
    if not met:
        first = max(taken_over, key=lambda r: r.ended_at)
        return inconclusive(
            name,
            expected=expected,
            reason=f"the answer ended {at - first.ended_at:.1f} s before {when}: raise "
            "load.long_answer_tokens",
        )
    return judged(
        name,
        met,
        bad,
        f"long answers still decoding when {when}",
        hint=hint if bad else None,
    )


def _removed_at(d: RunData) -> float | None:
    """When the target showed a victim replica removed (its deletion), after the act: a
    second's slack before it, as Kubernetes stamps a deletion to the second."""
    return min(
        (
            e.t
            for e in d.events
            if e.kind == EventKind.TERMINATING
            and d.t_act is not None
            and e.t >= d.t_act - 1.0
            and (e.pod in d.victims or not d.victims)
        ),
        default=None,
    )


def long_answer_finishes(d: RunData) -> CheckResult:
    """scale_to_zero: the long answer in flight when the scaler took over finishes, and it
    was still decoding when a scaler blind to it could act: autoscaler.idle_s after the
    take-over, or when the replica was removed, if sooner."""
    could = d.t_act + d.scaler_idle_s if d.t_act is not None else None
    removed = _removed_at(d)
    at = min(t for t in (could, removed) if t is not None) if could or removed else None
    when = (
        "the replica was removed"
        if removed is not None and at == removed
        else f"a scaler blind to it could act (autoscaler.idle_s {d.scaler_idle_s:g} s after "
        "it took over)"
    )
    return _long_answers(
        d,
        "long_answer_finishes",
        at,
        when,
        "the autoscaler scaled a replica to zero with a long answer in flight: it read request "
        "rate or queue length, which are zero during a long decode. Scale down on in-flight "
        "sequences (vllm:num_requests_running), with a cooldown longer than the longest answer",
    )


def long_answer_survives_scale_down(d: RunData) -> CheckResult:
    """scale_down: the long answer in flight when one replica was removed finishes."""
    return _long_answers(
        d,
        "long_answer_survives_scale_down",
        _removed_at(d),
        "the replica was removed",
        "the scale-down removed the replica decoding a long answer, and its drain (preStop + "
        "--shutdown-timeout within terminationGracePeriodSeconds) is shorter than the answer. "
        "Make scale-down pick idle replicas (pod-deletion-cost from vllm:num_requests_running) "
        "or make the drain as long as the longest answer",
    )


def scaled_to_zero(d: RunData) -> CheckResult:
    """The replica was scaled to zero: the scenario's premise, from observed pod counts."""
    caps = [e for e in d.events if e.kind == EventKind.CAPACITY and d.t_act and e.t >= d.t_act]
    zero = next((e for e in caps if e.detail.get("pods") == 0), None)
    if zero is not None:
        return passed(
            "scaled_to_zero",
            observed=f"0 pods at {zero.t - d.t_act:+.1f} s",
            expected="zero pods once idle",
            population=f"{len(caps)} pod-count changes",
        )
    if d.t_act is None:
        return inconclusive(
            "scaled_to_zero", expected="zero pods once idle", reason="the scaler never took over"
        )
    fewest = min((e.detail.get("pods", 0) for e in caps), default=None)
    return failed(
        "scaled_to_zero",
        observed=f"fewest pods {fewest}" if fewest is not None else "pod count never changed",
        expected="zero pods once idle",
        population=f"{len(caps)} pod-count changes",
        hint="the replica was never scaled to zero within the recovery time",
    )


def engine_counts_agree(d: RunData) -> CheckResult:
    """The engines as a third witness: the requests they ended without success (abort,
    error: vllm:request_success_total by finished_reason) are no more than the client
    records that did not complete. More means requests the engines cut that a client
    saw as complete, or never saw: lost between the gateway and the client. The engines'
    count is a lower bound (an exited pod's last moments may be missed), so this never
    fails on a count the engines did not make."""
    name, expected = "engine_counts_agree", "engine-side failures <= client records not complete"
    e = d.engine_counts
    if not e or not e.get("samples"):
        return skipped(name, expected=expected, reason="the engines' /metrics were not read")
    finished = e.get("finished") or {}
    bad = {r: n for r, n in finished.items() if r not in ("stop", "length")}
    engine_bad, engine_all = sum(bad.values()), sum(finished.values())
    client_bad = sum(1 for r in d.records if r.outcome != Outcome.COMPLETE)
    said = ", ".join(f"{r} {n}" for r, n in finished.items()) or "none"
    population = (
        f"{len(e.get('pods') or [])} engines' request_success_total ({said}); "
        f"{client_bad} of {len(d.records)} client records not complete"
    )
    if engine_all > d.sent:  # not judged: the other checks still are
        return skipped(
            name,
            expected=expected,
            reason=f"the engines ended {engine_all} requests and the load sent {d.sent}: other "
            "clients (or the harness's own requests, such as a canary's golden prompts) "
            "share these engines, so their endings cannot be matched to this run's",
        )
    if engine_bad <= client_bad:
        return passed(
            name,
            observed=f"{engine_bad} ended badly by the engines",
            expected=expected,
            population=population,
        )
    return failed(
        name,
        observed=f"the engines ended {engine_bad} badly ({', '.join(f'{r} {n}' for r, n in bad.items())}), "
        f"the clients saw {client_bad} not complete",
        expected=expected,
        population=population,
        hint="the engines aborted or errored requests that the client records show as "
        "complete or do not show at all: lost between the gateway and the client (a gateway "
        "that retried a request on another replica, or a proxy that closed a cut stream as "
        "if it were done); the gateway's log for those requests says which",
    )


def scaler_did_not_fight(d: RunData) -> CheckResult:
    """Where the workload has scalers of its own: none changed the replica count while the
    harness held it (or during its rollout). One that did changed the scenario under it:
    what ran is not what was planned, so the run proves nothing either way (its broken
    streams are still judged by the other checks)."""
    name, expected = "scaler_did_not_fight", "no scaler changes the count the harness holds"
    fights = [e for e in d.events if e.kind == EventKind.SCALER_FOUGHT]
    scalers = next(
        (e.detail.get("names") for e in d.events if e.kind == EventKind.WORKLOAD_SCALERS), []
    )
    if not fights:
        return passed(
            name,
            observed="no fight",
            expected=expected,
            population=f"replica changes by {', '.join(scalers)}",
        )
    t0 = d.t_start or fights[0].t
    said = []
    for e in fights[:MAX_LISTED]:
        x = e.detail
        against = f"held at {x['held']}" if x.get("held") is not None else "during its rollout"
        said.append(
            f"{replicas_writer(e, d.events)} set replicas {x['replicas_from']} -> "
            f"{x['replicas_to']} at {e.t - t0:+.1f} s ({against})"
        )
    return inconclusive(
        name,
        expected=expected,
        reason=f"a scaler fought the harness: {'; '.join(said)}. The scenario did not run as "
        f"planned. The workload's scalers: {', '.join(scalers) or 'unknown'}; pause them "
        "for the run, or let the scale scenarios hand them the count (kube.scaler=cluster)",
        observed=f"{len(fights)} change(s) against the harness",
    )


def rollout_duration_for(max_surge: int, max_unavailable: int, gpu_bound: bool) -> Callable:
    """The measured rollout against the planner's prediction from this run's own
    measured start-to-ready and drain times (fails beyond 3x + 2 s)."""

    def rollout_duration(d: RunData) -> CheckResult:
        from harness.plan import plan_rollout

        done = next((e.t for e in d.events if e.kind == EventKind.ROLLOUT_COMPLETE), None)
        if d.t_act is None:
            return inconclusive(
                "rollout_duration", expected="finished", reason="no rollout was started"
            )
        if done is None:
            return failed(
                "rollout_duration",
                observed="not finished",
                expected="finished",
                population="the rollout",
                hint="the rollout never finished: new pods never became ready (start-up, "
                "probes), or a surge pod could not be scheduled",
            )
        took = round(done - d.t_act, 2)
        ready_s, drain_s = _measured_pod_times(d)
        if ready_s is None:
            return skipped(
                "rollout_duration",
                expected="a prediction",
                reason=f"took {took} s; no new pod's start-to-ready time was observed, so no "
                "prediction could be made",
            )
        plan = plan_rollout(
            d.replicas,
            ready_s,
            drain_s or 0.0,
            max_surge,
            max_unavailable,
            gpu_bound=gpu_bound,
            step_s=0.1,
        )
        pred = plan.duration_s
        expected = f"about {pred:.1f} s (planner, from ready {ready_s:.1f} s, drain {drain_s or 0:.1f} s measured)"
        population = "this run's rollout"
        if took <= 3 * pred + 2:
            return passed(
                "rollout_duration", observed=f"{took} s", expected=expected, population=population
            )
        return failed(
            "rollout_duration",
            observed=f"{took} s",
            expected=expected,
            population=population,
            hint="the rollout took far longer than its own pods' start and drain times "
            "predict: pods waited to be scheduled (no spare GPUs) or for capacity",
        )

    return rollout_duration


def _measured_pod_times(d: RunData) -> tuple[float | None, float | None]:
    """Median start-to-ready of pods created after the act, and median drain of those
    terminated after it, from this run's own events."""
    if d.t_act is None:
        return None, None
    since = d.t_act - 1  # (a second's slack: Kubernetes stamps creation to the second)
    lives = pod_lives(d.events)
    ready_s = []
    for life in lives:
        if life.created is not None and life.created >= since:
            ready = life.ready_from(life.created)
            if ready is not None:
                ready_s.append(ready - life.created)
    drain_s = [
        life.removed - life.terminating
        for life in lives
        if life.terminating is not None
        and life.terminating >= since
        and life.removed is not None
        and life.removed >= life.terminating
    ]
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    return med(ready_s), med(drain_s)


def ttft_recovers_after_step(d: RunData, window_s: float = 1.0) -> CheckResult:
    """After a load step, how long TTFT breaks its SLO before it recovers: the first full
    window whose p90 is under the SLO and from which on the p90 of every request stays
    under it, before the run ends. A later request over the SLO (a round-robin gateway
    queues one behind long answers on one replica now and then) is then part of that
    p90, as the SLO budgets count it, not the end of the recovery: in a window of 7
    requests the "p90" is the slowest one, and one queued request made a recovered
    step read as never recovered."""
    name = "ttft_recovers_after_step"
    expected = f"under {d.ttft_slo_s} s within {d.recovery_budget_s} s"
    if d.t_act is None:
        return inconclusive(name, expected=expected, reason="no load step was recorded")
    after = [r for r in _slo_population(d) if r.sent_at >= d.t_act]
    windows: dict[int, list[float]] = {}
    for r in after:
        ttft = r.ttft_s if r.ttft_s is not None else float("inf")  # errors, hangs: breaches
        windows.setdefault(int((r.sent_at - d.t_act) // window_s), []).append(ttft)
    last_sent = max((r.sent_at for r in after), default=d.t_act)
    full = {w: v for w, v in windows.items() if d.t_act + (w + 1) * window_s <= last_sent}
    if not full:
        return inconclusive(name, expected=expected, reason="no full TTFT window after the step")

    def p90(values: list[float]) -> float:
        return sorted(values)[min(len(values) - 1, int(0.9 * len(values)))]

    ordered = sorted(full)

    def recovery(slo_s: float) -> tuple[int | None, float]:
        at = next(
            (
                w
                for w in ordered
                if p90(full[w]) <= slo_s
                and p90([v for u in ordered if u >= w for v in full[u]]) <= slo_s
            ),
            None,
        )
        return at, (at if at is not None else ordered[-1] + 1) * window_s

    recovered_at, breach_s = recovery(d.ttft_slo_s)
    recovered = recovered_at is not None
    population = f"{len(after)} requests in {len(full)} windows of {window_s:g} s after the step"
    slow = [r for r in after if r.ttft_s is None or r.ttft_s > d.ttft_slo_s]
    hint = (
        "new replicas take too long to serve after a load step: startup time (weights) plus the "
        "autoscaler's reaction; scale on queue length or in-flight requests, keep headroom, or "
        "cut startup time"
    )
    lagged = d.client_lagged(("during", "after"))
    if (not recovered or breach_s > d.recovery_budget_s) and lagged:
        # the client's delay only adds to TTFT: judged again with the SLO raised by it,
        # a step that still does not recover in time is the target's
        margin = max(max(s["p99_s"], s["max_s"]) for s in lagged.values())
        at, lenient_s = recovery(d.ttft_slo_s + margin)
        if at is not None and lenient_s <= d.recovery_budget_s:
            return inconclusive(
                name,
                expected=expected,
                reason=f"TTFT over SLO for {breach_s:.1f} s after the step, within the "
                f"client's own delay: {saturated(lagged, d)}",
                observed=f"TTFT over SLO for {breach_s:.1f} s after the step",
            )
    if not recovered:
        return failed(
            name,
            observed=f"TTFT still over SLO when the run ended ({breach_s:.1f} s)",
            expected=expected,
            population=population,
            bad=slow,
            hint=hint,
        )
    if breach_s > d.recovery_budget_s:
        return failed(
            name,
            observed=f"TTFT over SLO for {breach_s:.1f} s after the step",
            expected=expected,
            population=population,
            bad=slow,
            hint=hint,
        )
    later = [v for u in ordered if u >= recovered_at for v in full[u]]
    over = sum(1 for v in later if v > d.ttft_slo_s)
    then = f", then {over} of {len(later)} requests over it (p90 under)" if over else ""
    return passed(
        name,
        observed=f"TTFT over SLO for {breach_s:.1f} s after the step{then}",
        expected=expected,
        population=population,
    )


# --- the client ------------------------------------------------------------------------------

PERIOD_MS = round(PERIOD_S * 1000)
# a worker busier than this share of its core is the bottleneck itself; advice sizes the
# load so that each worker would run at TARGET_CPU, as load.workers: auto sizes it
BUSY_CPU = 0.8


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds >= 0.001 else f"{seconds * 1000:.2f} ms"


def _delay_text(s: dict) -> str:
    cpu = s.get("cpu_max")
    cpu_text = f", CPU up to {cpu:.0%}" if isinstance(cpu, (int, float)) else ""
    loop, arrival = s.get("loop_p99_s"), s.get("arrival_p99_s")
    # which of the two measures (harness.client_delay) said it, where the socket's did
    whose = (
        " of answers waiting in their sockets"
        if isinstance(arrival, (int, float)) and arrival > (loop or 0.0)
        else ""
    )
    return f"p99 {_ms(s['p99_s'])}{whose}{cpu_text}"


def workers_advice(lagged: dict[str, dict], d: RunData) -> str:
    """How many workers the load needed: each ran its core near full (busy), or the
    machine under it was busy with something else (then more workers do not help)."""
    n = max(1, int((d.client_delay or {}).get("all", {}).get("workers") or 1))
    cpu = max((s.get("cpu_max") or 0.0 for s in lagged.values()), default=0.0)
    if cpu >= BUSY_CPU:
        need = max(n + 1, math.ceil(n * cpu / TARGET_CPU))
        return (
            f"the load needed about {need} workers (load.workers: {need}; it ran {n}, each "
            f"using up to {cpu:.0%} of a core)"
        )
    return (
        f"its {n} worker(s) used at most {cpu:.0%} of a core, so the machine under them was "
        "busy with other work: run the load where it has cores of its own"
    )


SATURATED = "the load generator was saturated"


def saturated(lagged: dict[str, dict], d: RunData) -> str:
    """'the load generator was saturated (during: p99 340 ms, CPU up to 98%; limit 50 ms)'"""
    phases = "; ".join(f"{p}: {_delay_text(s)}" for p, s in lagged.items())
    return (
        f"{SATURATED} ({phases}; its limit {_ms(d.client_delay_limit_s)}): "
        f"{workers_advice(lagged, d)}"
    )


def client_kept_up(d: RunData) -> CheckResult:
    """The load generator's own delay (its event loop's lateness, harness.client_delay)
    within a share of the SLO in every phase. Past it, the latency checks of that phase do
    not judge a budget the run broke (the client's delay only adds to latency, so a budget
    met is met); stream outcomes are judged as ever: a slow client does not mend a
    broken stream."""
    name = "client_kept_up"
    limit = d.client_delay_limit_s
    slo = "ITL" if d.itl_slo_s else "TTFT"
    slo_s = d.itl_slo_s or d.ttft_slo_s
    expected = (
        f"delay p99 <= {_ms(limit)} in every phase ({d.client_delay_share:.0%} of the {slo} "
        f"SLO, {slo_s:g} s)"
    )
    phases = {p: s for p, s in (d.client_delay or {}).items() if p in PHASES}
    if not phases:
        return skipped(
            name,
            expected=expected,
            reason="the load reported no delay figures (workers of an older rollcheck)",
        )
    observed = {p: _delay_text(s) for p, s in phases.items()}
    samples = (d.client_delay.get("all") or {}).get("samples", 0)
    workers = (d.client_delay.get("all") or {}).get("workers", 0)
    population = f"{samples} timer wake-ups of {workers} worker(s), every {PERIOD_MS} ms"
    lagged = d.client_lagged()
    if not lagged:
        return passed(name, observed=observed, expected=expected, population=population)
    # provisional: settle_client_kept_up keeps it only if a latency check turned on it
    return CheckResult(
        name,
        Status.INCONCLUSIVE,
        observed,
        expected,
        population,
        reason=saturated(lagged, d),
    )


def settle_client_kept_up(results: list[CheckResult]) -> None:
    """After every check: client_kept_up stays INCONCLUSIVE only when a latency check
    could not judge because of the client's delay (its reason says the load generator was
    saturated). Otherwise every budget held or broke by more than that delay, so the
    verdict stands: the check passes, and still shows the delay over its limit."""
    mine = next((r for r in results if r.name == "client_kept_up"), None)
    if mine is None or mine.status != Status.INCONCLUSIVE:
        return
    turned = [
        r.name
        for r in results
        if r is not mine and r.status == Status.INCONCLUSIVE and SATURATED in (r.reason or "")
    ]
    if turned:
        mine.reason += (
            f"; {', '.join(turned)} could not be judged: the budget holds or breaks within "
            "that delay"
        )
        return
    mine.status = Status.PASS
    mine.observed = dict(mine.observed) | {
        "note": "over the limit, but every latency budget held or broke by more than the "
        "client's delay"
    }
    mine.reason = None


client_kept_up.settle = settle_client_kept_up


# --- information, not checks ----------------------------------------------------------------


def health_during_drain(events) -> dict[str, int]:
    """What the draining pod's /health answered (vLLM keeps 200 while draining)."""
    counts: dict[str, int] = {}
    for e in events:
        if e.kind == EventKind.ACTION and e.detail.get("action") == "health_probe":
            key = str(e.detail.get("status"))
            counts[key] = counts.get(key, 0) + 1
    return counts


def shared_checks(
    d: RunData,
    *,
    expect_broken_on_victims: bool = False,
    hold_slo: bool = True,
    slo_required: tuple[str, ...] = ("during",),
    slo_phases: tuple[str, ...] = PHASES,
) -> list[Check]:
    """The checks every scenario's run is held to, before its own: every request has its
    record, no stream broke (on the pods not disturbed, when the disturbed may break) or
    hung, the gateway is clean, the engines' counts agree, a scaler did not fight the
    scenario, and (hold_slo) the SLO budgets."""
    out = [
        accounting,
        other_pods_untouched if expect_broken_on_victims else no_broken_streams,
        no_hung_streams,
        gateway_clean,
        engine_counts_agree,
        client_kept_up,
    ]
    if any(e.kind in (EventKind.WORKLOAD_SCALERS, EventKind.SCALER_FOUGHT) for e in d.events):
        out.append(scaler_did_not_fight)  # a writer rollcheck did not know of fights too
    if hold_slo:
        out += [
            slo_budget_for("ttft", slo_required, slo_phases),
            slo_budget_for("itl", slo_required, slo_phases),
        ]
    return out


# --- start-up --------------------------------------------------------------------------


def _startup_window(probe: dict | None) -> float | None:
    """failureThreshold x periodSeconds: how long a probe lets a container fail."""
    return None if not probe else window_s(probe["failure_threshold"], probe["period_s"])


def starts_without_restarts(
    version: str, restarts: dict[str, int], probes: dict, startup_s: float | None
) -> Check:
    """start-up: the new version's pods come up without the kubelet restarting them.
    `restarts`: each new pod's container restarts as the target counted them; `probes`:
    the pod's startup and liveness probes ({period_s, failure_threshold} or None);
    `startup_s`: the version's own start-up time when it is known (the simulator's)."""

    def check(d: RunData) -> CheckResult:
        name = "starts_without_restarts"
        pods = sorted(restarts)
        if not pods:
            return inconclusive(
                name, expected="0 restarts", reason=f"no pod of version {version} was started"
            )
        # from the container's start (local target) or the pod's creation (kube)
        took = [
            life.startup_s
            for life in pod_lives(d.events)
            if life.pod in restarts and life.startup_s is not None
        ]
        observed_start = round(min(took), 2) if took else None
        population = f"{len(pods)} pods of version {version}"
        bad = {p: n for p, n in restarts.items() if n}
        live, start = probes.get("liveness"), probes.get("startup")
        live_w, start_w = _startup_window(live), _startup_window(start)
        if not bad and observed_start is None:  # no restart, but never ready either
            return failed(
                name,
                observed=f"no pod of version {version} became ready",
                expected="0 restarts, ready",
                population=population,
                hint="the new version did not start within scenario.recovery_s: a start-up "
                "longer than that, or a pod Pending (no free GPU); raise recovery_s or read "
                "the pod's events",
            )
        if not bad:
            within = f" within the startupProbe's {start_w:g} s" if start_w else ""
            observed = f"0 restarts; start-up {observed_start:g} s{within}"
            return passed(name, observed=observed, expected="0 restarts", population=population)
        killers = Counter(
            e.detail.get("probe")
            for e in d.events
            if e.kind == EventKind.PROBE_FAILED and e.pod in bad
        )
        by = ", ".join(f"{probe} probe {n}x" for probe, n in killers.most_common()) or "exits"
        observed = ", ".join(f"{p} restarted {n}x" for p, n in sorted(bad.items())) + f" ({by})"
        load = f"start-up {startup_s:g} s" if startup_s else "start-up (weights loading)"
        if start_w is None and live_w is not None:
            hint = (
                f"{load} > liveness {live['failure_threshold']} x {live['period_s']:g} s = "
                f"{live_w:g} s, and there is no startupProbe: the kubelet kills the engine while "
                "it loads weights, so the version never serves and the rollout never finishes. "
                "Add a startupProbe on /health whose failureThreshold x periodSeconds exceeds the "
                "slowest start-up (liveness only runs once it has passed)"
            )
        elif start_w is not None:
            hint = (
                f"{load} > startupProbe {start['failure_threshold']} x {start['period_s']:g} s = "
                f"{start_w:g} s: raise its failureThreshold to cover the slowest start-up"
            )
        else:
            hint = "the container exits while starting: read its log (kubectl logs --previous)"
        return failed(
            name, observed=observed, expected="0 restarts", population=population, hint=hint
        )

    return check


# --- canary --------------------------------------------------------------------------

_CANARY_HINTS = {
    "same": "with the same weights the new engine answers differently: a changed tokenizer, "
    "chat template, dtype or quantisation, or a sampling default; compare the answers side "
    "by side in the report before promoting",
    "new": "the new weights answer unlike the old ones (repetition, empty or garbled text, "
    "lost expected answers): a bad checkpoint, a wrong tokenizer or chat template; the "
    "canary was rolled back",
}


def canary_answers(result: dict) -> Check:
    """The canary's answers against the baseline's (harness.canary.compare, as a dict)."""

    def check(d: RunData) -> CheckResult:
        name = "canary_answers"
        population = (
            f"{result['prompts_compared']} golden prompts on {result.get('candidate_pod')} "
            f"against {result.get('baseline_pod')} ({result['mode']} weights)"
        )
        serving = result.get("candidate_pods_serving") or []
        if not serving:  # the timeline saw no candidate ready: whether it was one is unknown
            return inconclusive(
                name,
                expected="one candidate pod serving while its answers are compared",
                reason="no candidate pod was seen ready on the timeline while the answers "
                "were compared, so whether the rollout held at one is unknown",
            )
        if len(serving) > 1:  # the rollout went on before the gate decided
            return inconclusive(
                name,
                expected="one candidate pod serving while its answers are compared",
                reason=f"{len(serving)} candidate pods served while the answers were compared "
                f"({', '.join(serving)}): the rollout went on before the canary was judged, "
                "so this was not a canary gate",
            )
        if result["status"] == "inconclusive":
            return inconclusive(
                name, expected=result["expected"], reason="; ".join(result["reasons"])
            )
        if result["status"] == "pass":
            return passed(
                name,
                observed=result["observed"],
                expected=result["expected"],
                population=population,
            )
        observed = f"{result['observed']}: " + "; ".join(result["reasons"])
        return failed(
            name,
            observed=observed,
            expected=result["expected"],
            population=population,
            hint=_CANARY_HINTS[result["mode"]],
        )

    return check


# --- adapter_rollout ------------------------------------------------------------------


def adapter_answers(answers: dict) -> Check:
    """adapter_rollout: the golden prompts' answers of each version of the adapter, asked of
    every replica directly: {"old": name, "new": name, "versioned": bool, "before": {pod:
    [Answer]}, "after": {pod: [Answer]}} (before: the old version, asked before the new one
    was loaded). Each version answers alike on every replica, and the new version does not
    answer exactly as the old one: an engine that keeps an adapter's old weights after a
    reload in place (or a path with the old weights) shows as the same answers."""

    def check(d: RunData) -> CheckResult:
        name = "adapter_answers"
        old, new = answers["old"], answers["new"]
        before, after = answers["before"], answers["after"]
        expected = f"{new} answers alike on every replica, and not as {old} did"
        population = (
            f"{max((len(a) for a in after.values()), default=0)} golden prompts to "
            f"{len(after)} replicas, before and after"
        )
        if not before or not after:
            return inconclusive(name, expected=expected, reason="no replica was asked")
        for when, asked in (("before", before), ("after", after)):
            for pod, got in asked.items():
                bad = [a for a in got if not a.ok]
                if bad:
                    version = old if when == "before" else new
                    return failed(
                        name,
                        observed=f"{pod} did not answer {len(bad)} golden prompts to "
                        f"{version} ({bad[0].outcome}: {bad[0].error or 'no error given'})",
                        expected=expected,
                        population=population,
                        hint="the adapter must be loaded on every replica before requests name it",
                    )
        texts = {pod: [a.text for a in got] for pod, got in after.items()}
        first_pod, first = next(iter(texts.items()))
        odd = [pod for pod, t in texts.items() if t != first]
        if odd:
            return failed(
                name,
                observed=f"{', '.join(odd)} answer {new} otherwise than {first_pod}: the "
                "replicas serve different weights under one name",
                expected=expected,
                population=population,
                hint="load each version on every replica from the same path, under a name of "
                "its own",
            )
        old_texts = {tuple(a.text for a in got) for got in before.values()}
        if tuple(first) in old_texts:
            how = "reloaded in place under the same name" if not answers["versioned"] else ""
            was = "before its reload" if old == new else f"as {old} did"
            return failed(
                name,
                observed=f"{new} answers every golden prompt exactly {was}: the old weights"
                + (f" ({how})" if how else ""),
                expected=expected,
                population=population,
                hint="an engine may keep an adapter's old weights when it is reloaded in place "
                "(vLLM keeps its id, and its prefix cache); give each version a name of its own "
                "(support-v1, support-v2), move the traffic by weight, then unload the old one"
                if how
                else "the new version's path holds the old weights: check adapter.path",
            )
        return passed(
            name,
            observed=f"{new} answers alike on {len(texts)} replicas, not as {old}",
            expected=expected,
            population=population,
        )

    return check


def adapter_unload_clean(d: RunData) -> CheckResult:
    """adapter_rollout: the old version unloaded only once no request named it. A request
    naming an adapter after its unload gets the engine's 404 ("does not exist"), counted
    here by name; the streams on the old version in flight at its unload go on to their end
    (the engine keeps the adapter) and must end complete."""
    name = "adapter_unload_clean"
    unloads = [
        e for e in d.events
        if e.kind == EventKind.ACTION and e.detail.get("action") == "adapter_unload"
    ]  # fmt: skip
    expected = "no request names the old version after its unload; its streams finish"
    if not unloads:
        return skipped(
            name,
            expected=expected,
            reason="no version was unloaded (the adapter was reloaded in place)",
        )
    old, t = unloads[0].detail.get("adapter"), unloads[0].t
    mine = [r for r in d.records if (r.tags or {}).get("model") == old]
    if not mine:  # nothing named it: whether its unload was clean cannot be told
        return inconclusive(name, expected=expected, reason=f"no request of the load named {old}")
    late = [r for r in mine if r.sent_at >= t]
    cut = [r for r in mine if r.sent_at < t <= r.ended_at and r.outcome not in OK_OUTCOMES]
    population = f"{len(mine)} requests naming {old}, {len(late)} sent after its unload"
    if late:
        gone = sum(1 for r in late if r.status == 404)
        return failed(
            name,
            observed=f"{len(late)} requests named {old} after its unload at "
            f"{t - (d.t_act or t):+.1f} s ({gone} got 404 'does not exist')",
            expected=expected,
            population=population,
            hint="move every request to the new version (a last step of 100%) before "
            "unloading the old one",
            bad=late,
        )
    if cut:
        return failed(
            name,
            observed=f"{len(cut)} streams on {old} in flight at its unload did not finish "
            f"({', '.join(sorted({r.outcome for r in cut}))})",
            expected=expected,
            population=population,
            hint="an engine should finish what it serves on an adapter it unloads",
            bad=cut,
        )
    in_flight = sum(1 for r in mine if r.sent_at < t <= r.ended_at)
    return passed(
        name,
        observed=f"none after the unload; {in_flight} in flight at it finished",
        expected=expected,
        population=population,
    )


# --- weighted_canary ------------------------------------------------------------------

_SPLIT_HINT = (
    "the gateway did not split the traffic by its weights: a stable backend whose Service "
    "selects the app's pods by their app label alone holds the candidate's pods too (the "
    "candidate then serves its weight and a share of the rest); give each version's "
    "Service a selector of its own (a version or pod-template-hash label, as Argo Rollouts "
    "adds), and check the weights the gateway reports on the route"
)


def _weighted_steps(d: RunData, result: dict) -> list:
    """Every step the gateway applied, judged again on the final, traced records."""
    from harness.weights import judge_step, windows

    steps = windows(d.events, d.t_end or max((r.ended_at for r in d.records), default=0))
    if not steps:
        return []
    reference = [r for r in d.records if r.sent_at < steps[0].start]
    delay = ((d.client_delay or {}).get("all") or {}).get("p99_s")
    return [
        judge_step(
            w,
            d.records,
            result["version"],
            reference,
            d.ttft_slo_s,
            result["min_samples"],
            (delay,) if delay is not None else (),
        )
        for w in steps
    ]


def weighted_split(result: dict) -> Check:
    """weighted_canary: at each step, the share of the streams the candidate served (each
    traced to its pod) against the weight the gateway applied, within max(10 points,
    3 binomial standard deviations) (harness.weights)."""

    def check(d: RunData) -> CheckResult:
        name = "weighted_split"
        expected = "each version's share of the streams within the tolerance of its weight"
        steps = _weighted_steps(d, result)
        if not steps:
            return inconclusive(
                name,
                expected=expected,
                reason="the gateway never applied a weight above 0 ("
                + (
                    "the golden answers stopped the canary before any traffic moved"
                    if result["action"] == "rolled back before any traffic"
                    else "no gateway_updated event with a split"
                )
                + ")",
            )
        population = f"{sum(s.requests for s in steps)} streams traced in {_steps(len(steps))}"
        untraced = sum(s.untraced for s in steps)
        if untraced:
            population += f" ({untraced} more not traced to a pod, left out)"
        observed = "; ".join(s.split_text() for s in steps)
        if any(s.split_ok is False for s in steps):
            return failed(name, observed=observed, expected=expected, population=population,
                          hint=_SPLIT_HINT)  # fmt: skip
        if any(s.split_ok is None for s in steps):
            return inconclusive(name, expected=expected, reason=observed, observed=observed)
        return passed(name, observed=observed, expected=expected, population=population)

    return check


def weighted_candidate(result: dict) -> Check:
    """weighted_canary: the candidate's golden answers before any traffic moved, and at
    each step its streams against the baseline's (broken streams, goodput, TTFT, median
    ITL: harness.weights.judge_step on the final records); the action the live judgement
    took (promoted, or rolled back at a step) is in the account."""

    def check(d: RunData) -> CheckResult:
        name = "weighted_candidate"
        version, action = result["version"], result["action"]
        expected = (
            f"{version}'s golden answers agree, and at every step its streams as good as "
            "the baseline's"
        )
        golden = result["golden"]
        if golden["status"] == "fail":
            return failed(
                name,
                observed=f"golden answers: {golden['observed']}: "
                + "; ".join(golden["reasons"])
                + f"; {action}",
                expected=expected,
                population=f"{golden['prompts_compared']} golden prompts",
                hint=_CANARY_HINTS[golden["mode"]],
            )
        if golden["status"] != "pass":
            return inconclusive(name, expected=expected, reason="; ".join(golden["reasons"]))
        steps = _weighted_steps(d, result)
        if not steps:
            return inconclusive(name, expected=expected, reason="no step ran")
        cand = sum(s.candidate for s in steps)
        population = f"{cand} streams of {version} in {_steps(len(steps))}, against the baseline's"
        bad = next((s for s in steps if s.reasons), None)
        if bad is not None:
            return failed(
                name,
                observed=f"at {bad.percent:g}%: " + "; ".join(bad.reasons) + f"; {action}",
                expected=expected,
                population=population,
                hint="the candidate is worse than the baseline under the same traffic; the "
                "rollback kept the damage to the step's share of the requests",
                bad=[r for r in d.records if r.version == version and r.broken],
            )
        live = next((s for s in result.get("steps") or [] if s.get("reasons")), None)
        if live is not None:  # the live judgement rolled back what the final records pass
            return inconclusive(
                name,
                expected=expected,
                reason=f"rolled back at {live['percent']:g}% on the streams judged then ("
                + "; ".join(live["reasons"])
                + "), which the step's final records do not confirm",
            )
        unknown = next((s for s in steps if s.unknown), None)
        if unknown is not None:
            return inconclusive(
                name,
                expected=expected,
                reason=f"at {unknown.percent:g}%: "
                + "; ".join(unknown.unknown)
                + f" ({action}); observe each step longer (weighted_canary.step_max_s) or "
                "give it more load",
            )
        done = ", ".join(f"{s.percent:g}%" for s in steps)
        return passed(
            name,
            observed=f"golden answers agree; as good as the baseline at {done}; {action}",
            expected=expected,
            population=population,
        )

    return check


def _steps(n: int) -> str:
    return f"{n} step" + ("" if n == 1 else "s")


# --- shadow -----------------------------------------------------------------------------


def shadow_not_leaked(result: dict) -> Check:
    """shadow: no stream a user received came from the candidate, whose answers the gateway
    must discard (every record traced to its pod and version)."""

    def check(d: RunData) -> CheckResult:
        name = "shadow_not_leaked"
        version = result["version"]
        expected = f"no user's stream answered by {version} (the shadow)"
        traced = [r for r in d.records if r.version is not None]
        if not traced:
            return inconclusive(name, expected=expected, reason="no stream was traced to a pod")
        untraced = len(d.records) - len(traced)
        population = f"{len(traced)} streams traced to a pod" + (
            f" ({untraced} more not traced, left out)" if untraced else ""
        )
        leaked = [r for r in traced if r.version == version]
        if leaked:
            return failed(
                name,
                observed=f"{len(leaked)} users' streams answered by {version} ({_by_pod(leaked)})",
                expected=expected,
                population=population,
                hint="the Service users reach selects the candidate's pods too (a selector by "
                "app label alone): give the candidate a Service of its own, and mirror to it",
                bad=leaked,
            )
        return passed(name, observed=f"none of {version}", expected=expected, population=population)

    return check


def shadow_served(result: dict) -> Check:
    """shadow: the candidate served what the gateway mirrored to it: the share of the
    window's requests mirrored (the gateway's log of each; where the gateway keeps none,
    as a cluster's does not, the candidate engines' own count of what they took), each
    answered 200 and read to its end, and the candidate engines' own counters finishing
    them (a mirrored request it refused, failed or aborted is named)."""

    def check(d: RunData) -> CheckResult:
        from harness.weights import split_tolerance

        name = "shadow_served"
        version, percent = result["version"], result["percent"]
        start, end = result["window"]
        expected = f"{percent:g}% of the window's requests mirrored, and {version} finishing each"
        sent = {r.request_id for r in d.records if start <= r.sent_at < end}
        population = f"{len(sent)} requests sent while the mirror was on"
        if not sent:
            return inconclusive(name, expected=expected, reason="no request was sent in the window")
        finished = result["candidate_finished"]
        done = sum(n for reason, n in finished.items() if reason in ("stop", "length"))
        cut = {reason: n for reason, n in finished.items() if reason not in ("stop", "length")}
        if result["mirrored"] is None:  # no gateway line per mirrored request
            mirrored, refused = sum(finished.values()), []
            how = f"{version}'s engines took {mirrored} of {len(sent)}"
        else:
            lines = [m for m in result["mirrored"] if m["request_id"] in sent]
            mirrored = len(lines)
            refused = [m for m in lines if m["status"] >= 400 or m["upstream_status"] != "200"]
            how = f"the gateway mirrored {mirrored} of {len(sent)}"
        share = mirrored / len(sent)
        tolerance = split_tolerance(percent / 100, len(sent))
        problems = []
        if abs(share - percent / 100) > tolerance:
            problems.append(
                f"{how} ({share:.0%}), off its {percent:g}% by more than "
                f"±{tolerance * 100:.0f} points"
            )
        if refused:
            statuses = Counter(m["upstream_status"] or str(m["status"]) for m in refused)
            ids = ", ".join(m["request_id"] for m in refused[:MAX_LISTED])
            problems.append(
                f"{version} could not serve {len(refused)} mirrored requests ("
                + ", ".join(f"{n} answered {s}" for s, n in sorted(statuses.items()))
                + f"; e.g. {ids})"
            )
        if cut:
            problems.append(
                f"{version}'s engines ended "
                + ", ".join(f"{n} {reason}" for reason, n in cut.items())
                + f" of the requests they took (and finished {done})"
            )
        observed = f"{how} ({share:.0%}); {version} finished {done} (its engines' counters)"
        if result["mirrored"] is None:
            observed += "; the gateway keeps no line per mirrored request"
        if problems:
            hint = (
                "the gateway closed each mirrored request after its headers and the engine "
                "aborted it: nginx's mirror (ingress-nginx's mirror-target) reads only the "
                "headers of a mirrored answer; mirror with a gateway that reads the whole "
                "answer (Envoy's request mirroring does)"
                if cut.get("abort") and not refused
                else "the candidate fails requests the baseline serves: it is not ready to "
                "take traffic"
            )
            return failed(
                name,
                observed="; ".join(problems),
                expected=expected,
                population=population,
                hint=hint,
            )
        return passed(name, observed=observed, expected=expected, population=population)

    return check


def shadow_candidate(result: dict) -> Check:
    """shadow: the candidate's golden answers (asked directly), and its TTFT and
    inter-token latency under the mirrored load against the baseline's under the users'
    load, from the engines' own histograms over the window (harness.histograms)."""

    def check(d: RunData) -> CheckResult:
        from harness.histograms import ITL, TTFT, compare, count, quantile
        from harness.weights import ms_text

        name = "shadow_candidate"
        version = result["version"]
        expected = f"{version}'s golden answers agree, and its latency as the baseline's"
        golden = result["golden"]
        if golden["status"] == "fail":
            return failed(
                name,
                observed="golden answers: "
                + golden["observed"]
                + ": "
                + "; ".join(golden["reasons"]),
                expected=expected,
                population=f"{golden['prompts_compared']} golden prompts",
                hint=_CANARY_HINTS[golden["mode"]],
            )
        if golden["status"] != "pass":
            return inconclusive(name, expected=expected, reason="; ".join(golden["reasons"]))

        def hist(side: str, family: str) -> list[tuple[float, float]]:
            rows = result["histograms"][side][family]
            return [(math.inf if b == "+Inf" else float(b), n) for b, n in rows]

        said, worse, unknown = [], [], []
        for family, label in ((TTFT, "TTFT"), (ITL, "inter-token latency")):
            base, cand = hist("baseline", family), hist("candidate", family)
            change, how = compare(base, cand, result["min_samples"])
            mb, mc = quantile(base, 0.5), quantile(cand, 0.5)
            text = f"{label} median {ms_text(mc)} against {ms_text(mb)} ({how})"
            said.append(text)
            if change == "worse":
                worse.append(text)
            elif how.startswith("cannot tell"):
                unknown.append(text)
        population = (
            f"{count(hist('candidate', TTFT))} of {version}'s requests and "
            f"{count(hist('baseline', TTFT))} of the baseline's, by their engines' histograms"
        )
        if worse:
            return failed(
                name,
                observed="; ".join(worse),
                expected=expected,
                population=population,
                hint="the candidate is slower than the baseline under the same load: it would "
                "be slower for users",
            )
        if unknown:
            return inconclusive(
                name,
                expected=expected,
                reason="; ".join(unknown)
                + "; mirror for longer (shadow.window_max_s) or a larger share (shadow.percent)",
            )
        return passed(
            name,
            observed="golden answers agree; " + "; ".join(said),
            expected=expected,
            population=population,
        )

    return check


_PD_HINT = (
    "a decode engine continued from a KV that the other version's weights computed: the "
    "P/D handshake compares the engine version, the model's shape and the KV's layout, not "
    "the weights (vLLM's NIXL connector, vllm-project/vllm #55776). Route by revision "
    "(llm-d's revision-aware P/D routing: a decode takes KVs only from its own version's "
    "prefill pods), roll the two roles as one release, or put a hash of the weights in "
    "the compatibility check, so that a KV of other weights is refused and prefilled again"
)


def pd_answers(result: dict) -> Check:
    """pd_rollout: every golden answer sent through the gateway while the roles rolled is
    the old or the new version's own (each version's answer from its own prefill/decode
    pair, before and after the rollout); one that is neither was built from both."""

    def check(d: RunData) -> CheckResult:
        name = "pd_answers_unmixed"
        old, new = result["versions"]
        expected = f"every golden answer {old}'s or {new}'s own, none built from both"
        if result.get("baseline_problem"):
            return inconclusive(name, expected=expected, reason=result["baseline_problem"])
        s = result["summary"]
        counts = s["counts"]
        if not s["answers"]:
            return inconclusive(
                name, expected=expected, reason="no golden answer was sent while the roles rolled"
            )
        said = [f"{counts.get(v, 0)} {v}'s" for v in (old, new)]
        if counts.get("broken"):
            said.append(f"{counts['broken']} broken (the stream checks judge how)")
        population = f"{s['answers']} golden answers through the gateway during the rollout"
        if s["mixed"]:
            pairs = "; ".join(
                f"decode {p['decode_pod']} from prefill {p['prefill_pod']} ({p['answers']})"
                for p in s["pairs"][:4]
            )
            return failed(
                name,
                observed=f"{s['mixed']} golden answers neither {old}'s nor {new}'s (built from "
                f"both), from {s['first_mixed_s']:+.1f} s to {s['last_mixed_s']:+.1f} s after "
                f"the rollout began ({s['mixing_s']:.1f} s of mixing): {pairs}; the others: "
                + ", ".join(said),
                expected=expected,
                population=population,
                hint=_PD_HINT,
            )
        if not counts.get(old) and not counts.get(new):
            return inconclusive(
                name, expected=expected, reason="every golden answer sent during it broke"
            )
        return passed(name, observed=", ".join(said), expected=expected, population=population)

    return check


def pd_prefill_waiting(result: dict) -> Check:
    """pd_prefill: the act reached decode pods waiting on the prefill role (the prefills
    in flight on the victim at the act, from the prefill Service's log), and what became
    of them and of the prefills that failed after it, as the decode pods saw it. The
    shared stream checks judge the users' streams (a hang, an error passed on)."""

    def check(d: RunData) -> CheckResult:
        name = "pd_prefill_waiting"
        act, victim = result["act"], result["victim"]
        where = "the prefill role" if act == "to_zero" else f"prefill pod {victim}"
        expected = f"decode pods waiting on {where} at the act, each answered: never a hang"
        waiting = result["waiting"]
        view = result["decode_view"]
        if not waiting:
            return inconclusive(
                name,
                expected=expected,
                reason=f"no prefill on {where} was still to end at the act (the prefill "
                "Service's log): no decode pod was waiting on it",
            )
        ended = Counter(
            f"{w['status']}"
            + (f" (upstream {w['upstream_status']})" if w["upstream_status"] else "")
            for w in waiting
        )
        observed = (
            f"{len(waiting)} prefills on {where} not ended at the act, ended: "
            + ", ".join(f"{n} answered {s}" for s, n in ended.most_common())
            + f"; the decode pods passed {view['passed_on']} failed prefills on as the "
            f"client's error and computed {view['fallback']} themselves"
            + (
                " (" + "; ".join(f"{n} {why}" for why, n in list(view["why"].items())[:3]) + ")"
                if view["why"]
                else ""
            )
        )
        population = f"{len(waiting)} prefills not ended at the act (the prefill Service's log)"
        slow = [w for w in waiting if w["ended_s"] > d.stall_timeout_s]
        if slow:
            return failed(
                name,
                observed=f"{len(slow)} decode pods' prefills on {where} ended only "
                f"{max(w['ended_s'] for w in slow):.1f} s after the act, past the stall "
                f"timeout ({d.stall_timeout_s:g} s): their users' streams hung meanwhile; "
                + observed,
                expected=expected,
                population=population,
                hint="a prefill engine that stops answering at SIGTERM (vLLM's default "
                "--shutdown-timeout 0) holds the decode's request until its SIGKILL, and "
                "llm-d's sidecar sets no timeout on the prefill: drain the prefill engine "
                "(--shutdown-timeout), give the sidecar a prefill timeout and let the "
                "decode prefill a request itself when its prefill fails",
            )
        if view["passed_on"]:
            return failed(
                name,
                observed=observed,
                expected=expected,
                population=population,
                hint="the decode pods passed their failed prefills on as their users' errors "
                "(llm-d's sidecar gives the client the prefill's status): let a decode "
                "prefill the request itself when its prefill fails or no prefill pod can take "
                "it, as a P/D scheduler's decode-only path does",
            )
        return passed(name, observed=observed, expected=expected, population=population)

    return check
