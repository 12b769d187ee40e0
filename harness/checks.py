"""Verdicts: pure functions from joined run data to check results.

Each check says what it saw, what it expected, which requests broke it, and a
hint naming the likely misconfiguration (rules from shared/facts.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from harness.streams import Outcome, StreamRecord

MAX_LISTED = 200  # offending request ids kept per check


@dataclass
class CheckResult:
    name: str
    passed: bool
    observed: object
    expected: object
    requests: list[str] = field(default_factory=list)
    hint: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def check_accounting(sent: int, records: Sequence[StreamRecord], outcome_total: int) -> CheckResult:
    """Nothing lost: requests sent = records written = outcomes counted."""
    ids = [r.request_id for r in records]
    dupes = len(ids) - len(set(ids))
    ok = sent == len(records) == outcome_total and dupes == 0
    return CheckResult(
        "accounting",
        ok,
        {"sent": sent, "records": len(records), "outcomes": outcome_total, "duplicates": dupes},
        "sent = records = outcomes, no duplicate request ids",
        hint=None if ok else "records were lost or duplicated: a harness bug, please report it",
    )


def check_all_complete(records: Sequence[StreamRecord]) -> CheckResult:
    bad = [r for r in records if r.outcome not in (Outcome.COMPLETE, Outcome.CANCELLED)]
    return CheckResult(
        "all_streams_complete",
        not bad,
        len(bad),
        0,
        [r.request_id for r in bad[:MAX_LISTED]],
        hint=hint_for_outcomes(bad) if bad else None,
    )


def check_ttft_slo(records: Sequence[StreamRecord], slo_s: float | None) -> CheckResult:
    breaches = [r for r in records if "ttft_slo_breach" in r.flags]
    return CheckResult(
        "ttft_slo",
        not breaches,
        len(breaches),
        f"0 streams with TTFT > {slo_s} s",
        [r.request_id for r in breaches[:MAX_LISTED]],
        hint="TTFT over the SLO: too few ready replicas for the load, or requests queued "
        "behind max_num_seqs"
        if breaches
        else None,
    )


HINTS = {
    Outcome.ABORTED: "streams ended with finish_reason abort: the engine aborted in-flight "
    "requests at SIGTERM. Set the engine's --shutdown-timeout to about the p99 answer time "
    "and terminationGracePeriodSeconds above preStop + that timeout",
    Outcome.TRUNCATED: "streams closed with neither finish_reason nor [DONE]: an engine older "
    "than vLLM v0.18 exits on SIGTERM without telling clients; upgrade, or drain with preStop",
    Outcome.MISSING_DONE: "a finish_reason arrived but no [DONE]: a proxy or the engine closed "
    "the stream early",
    Outcome.RESET: "connections broke mid-stream: the process was killed (SIGKILL at the grace "
    "deadline, OOM, crash) or the gateway cut the upstream; raise "
    "terminationGracePeriodSeconds above preStop + the engine's shutdown timeout",
    Outcome.HUNG: "streams stopped without an error and the client had to give up: a frozen "
    "engine, or one that stops sending at SIGTERM but keeps connections open (seen on a vLLM "
    "build in default abort mode); set --shutdown-timeout so it drains",
    Outcome.ERROR_EVENT: "the engine sent an error object inside the stream (followed by [DONE]); "
    "a checker that only looks for [DONE] would call these successes",
    Outcome.HTTP_ERROR: "requests got a non-2xx status: no ready endpoint (503), the gateway "
    "could not reach an upstream (502/504), or admission refused them",
    Outcome.CONNECT_ERROR: "requests got no response: nothing listening, or the connection "
    "closed before headers",
    Outcome.NOT_SSE: "2xx responses that were not a parseable event stream",
}


def hint_for_outcomes(bad: Sequence[StreamRecord]) -> str:
    """The hint for the most common broken outcome."""
    counts: dict[str, int] = {}
    for r in bad:
        counts[r.outcome] = counts.get(r.outcome, 0) + 1
    worst = max(counts, key=counts.get)
    return HINTS.get(Outcome(worst), worst)


# --- scenario checks ---------------------------------------------------------------
# Each takes RunData (records joined with gateway lines and cluster events) and
# returns one CheckResult. They never do I/O.

OK_OUTCOMES = (Outcome.COMPLETE, Outcome.CANCELLED)


@dataclass
class RunData:
    records: list[StreamRecord]
    events: list  # harness.cluster.events.Event
    access: list  # harness.gateway.GatewayLine
    errors: list  # harness.gateway.ErrorLine
    sent: int
    replicas: int
    max_unavailable: int
    stall_timeout_s: float
    ttft_slo_s: float
    t_act: float | None = None
    t_recovered: float | None = None
    victims: list[str] = field(default_factory=list)
    recovery_budget_s: float = 60.0
    ttft_attainment: float = 0.9
    predicted_rollout_s: float | None = None

    def on_victims(self, records: Sequence[StreamRecord]) -> list[StreamRecord]:
        return [r for r in records if not self.victims or r.pod in self.victims]

    def in_flight_on_victims(self) -> list[StreamRecord]:
        """Streams open at the disruption on the pods it was aimed at."""
        from harness.timeline import in_flight_at

        return self.on_victims(in_flight_at(self.records, self.t_act)) if self.t_act else []


def _result(name, bad, total, hint, expected=None) -> CheckResult:
    return CheckResult(
        name,
        not bad,
        f"{len(bad)} of {total}",
        expected or f"0 of {total}",
        [r.request_id for r in bad[:MAX_LISTED]],
        hint if bad else None,
    )


def in_flight_streams_finish(d: RunData) -> CheckResult:
    """Streams in flight on the disturbed pods at the disruption end normally."""
    recs = d.in_flight_on_victims()
    bad = [r for r in recs if r.outcome not in OK_OUTCOMES]
    return _result(
        "in_flight_streams_finish", bad, len(recs), hint_for_outcomes(bad) if bad else None
    )


def no_broken_streams(d: RunData) -> CheckResult:
    bad = [r for r in d.records if r.outcome not in OK_OUTCOMES]
    return _result(
        "no_broken_streams", bad, len(d.records), hint_for_outcomes(bad) if bad else None
    )


def no_abort_after_sigterm(d: RunData) -> CheckResult:
    """No request that reached a pod after its SIGTERM was aborted or refused."""
    from harness.timeline import first_per_pod

    sigterm = first_per_pod(d.events, "sigterm")
    late = [r for r in d.records if r.pod in sigterm and r.sent_at >= sigterm[r.pod]]
    bad = [r for r in late if r.outcome not in OK_OUTCOMES]
    hint = (
        "requests reached pods after SIGTERM because the gateway had not yet dropped them; "
        "vLLM accepts and aborts them while draining. Add a preStop sleep longer than the "
        "endpoint propagation delay (llm-d uses 15 s)"
    )
    return _result("no_abort_after_sigterm", bad, len(late), hint)


def no_hung_streams(d: RunData) -> CheckResult:
    bad = [r for r in d.records if r.outcome == Outcome.HUNG]
    return _result("no_hung_streams", bad, len(d.records), HINTS[Outcome.HUNG])


def gateway_clean(d: RunData) -> CheckResult:
    """No 499 / 502 / 504 at the gateway and no upstream that closed mid-response."""
    bad_status = [a for a in d.access if a.status in (499, 502, 504)]
    premature = [e for e in d.errors if e.prematurely_closed]
    observed = {
        "499": sum(a.status == 499 for a in d.access),
        "502": sum(a.status == 502 for a in d.access),
        "504": sum(a.status == 504 for a in d.access),
        "upstream_prematurely_closed": len(premature),
    }
    ok = not bad_status and not premature
    hint = None
    if not ok:
        hint = (
            "the gateway saw upstreams die mid-response (502 / prematurely closed): pods were "
            "killed with streams open; raise terminationGracePeriodSeconds above preStop + the "
            "engine's shutdown timeout"
            if premature or observed["502"]
            else "clients gave up before headers (499) or the gateway timed out (504): TTFT too long"
        )
    return CheckResult(
        "gateway_clean",
        ok,
        observed,
        {"499": 0, "502": 0, "504": 0, "upstream_prematurely_closed": 0},
        [a.request_id for a in bad_status[:MAX_LISTED] if a.request_id],
        hint,
    )


def killed_streams_fail_fast(d: RunData) -> CheckResult:
    """Streams on a killed pod end with an error within the stall timeout, never hang."""
    recs = d.in_flight_on_victims()
    bad = [
        r
        for r in recs
        if r.outcome == Outcome.HUNG
        or (r.outcome not in OK_OUTCOMES and r.ended_at - d.t_act > d.stall_timeout_s + 1)
    ]
    hint = (
        "streams on the killed pod did not fail fast: the client waited for data that never came. "
        "Make the gateway's proxy_read_timeout shorter than clients' patience, or send SSE "
        "keep-alives and let clients time out on missing tokens"
    )
    return _result("killed_streams_fail_fast", bad, len(recs), hint)


def other_pods_untouched(d: RunData) -> CheckResult:
    others = [r for r in d.records if r.pod is not None and r.pod not in d.victims]
    bad = [r for r in others if r.outcome not in OK_OUTCOMES]
    return _result(
        "other_pods_untouched",
        bad,
        len(others),
        "streams on pods that were not disturbed broke: " + hint_for_outcomes(bad) if bad else None,
    )


def capacity_floor(d: RunData) -> CheckResult:
    """Available replicas never below replicas - maxUnavailable during the disruption."""
    floor = d.replicas - d.max_unavailable
    caps = [
        e.detail
        for e in d.events
        if e.kind == "capacity"
        and d.t_act is not None
        and e.t >= d.t_act
        and (d.t_recovered is None or e.t <= d.t_recovered)
    ]
    lowest = min((c["available"] for c in caps), default=None)
    ok = lowest is None or lowest >= floor
    return CheckResult(
        "capacity_floor",
        ok,
        lowest,
        f">= {floor}",
        [],
        None
        if ok
        else "capacity fell below the rollout's floor: lower maxUnavailable, or "
        "raise maxSurge where spare GPUs exist",
    )


def recovery_time(d: RunData) -> CheckResult:
    if d.t_act is None or d.t_recovered is None:
        return CheckResult(
            "recovery_time",
            False,
            "did not recover",
            f"<= {d.recovery_budget_s} s",
            hint="the target never returned to its desired ready replicas",
        )
    took = round(d.t_recovered - d.t_act, 2)
    ok = took <= d.recovery_budget_s
    return CheckResult(
        "recovery_time",
        ok,
        f"{took} s",
        f"<= {d.recovery_budget_s} s",
        [],
        None
        if ok
        else "recovery took too long: engine start time (weight loading) multiplies "
        "into every replacement; check the startupProbe and image/weight caching",
    )


def ttft_slo_after_recovery(d: RunData) -> CheckResult:
    after = [
        r
        for r in d.records
        if d.t_recovered and r.sent_at >= d.t_recovered and r.outcome == Outcome.COMPLETE
    ]
    within = [r for r in after if r.ttft_s is not None and r.ttft_s <= d.ttft_slo_s]
    share = len(within) / len(after) if after else 1.0
    ok = share >= d.ttft_attainment
    slow = [r for r in after if r not in within]
    return CheckResult(
        "ttft_slo_after_recovery",
        ok,
        f"{share:.0%} of {len(after)} within {d.ttft_slo_s} s",
        f">= {d.ttft_attainment:.0%}",
        [r.request_id for r in slow[:MAX_LISTED]],
        None if ok else "TTFT stays over its SLO after recovery: too few replicas for the load",
    )


def health_recorded_during_drain(d: RunData) -> CheckResult:
    """What the draining pod's /health said (vLLM keeps 200 while draining)."""
    answers = [
        e.detail.get("status")
        for e in d.events
        if e.kind == "action" and e.detail.get("action") == "health_probe"
    ]
    counts: dict[str, int] = {}
    for a in answers:
        counts[str(a)] = counts.get(str(a), 0) + 1
    return CheckResult(
        "health_recorded_during_drain",
        bool(answers),
        counts or "nothing recorded",
        "the /health answers of the draining pod, recorded",
        [],
        None if answers else "the drained pod's /health could not be polled",
    )


def long_answer_finishes(d: RunData) -> CheckResult:
    longs = [
        r
        for r in d.records
        if r.tags.get("user") == "long" and (d.t_act is None or r.ended_at >= d.t_act)
    ]
    bad = [r for r in longs if r.outcome not in OK_OUTCOMES]
    hint = (
        "the autoscaler scaled a replica to zero with a long answer in flight: it read request "
        "rate or queue length, which are zero during a long decode. Scale down on in-flight "
        "sequences (vllm:num_requests_running), with a cooldown longer than the longest answer"
    )
    return _result(
        "long_answer_finishes",
        bad,
        len(longs),
        hint,
        expected=f"0 of {len(longs)} broken" if longs else "a long answer in flight",
    )


def rollout_duration(d: RunData) -> CheckResult:
    """The measured rollout against the planner's prediction (fails beyond 3x)."""
    from harness.timeline import event_time

    done = event_time(d.events, "rollout_complete")
    took = round(done - d.t_act, 2) if done and d.t_act else None
    pred = d.predicted_rollout_s
    ok = took is not None and (pred is None or took <= 3 * pred + 2)
    return CheckResult(
        "rollout_duration",
        ok,
        f"{took} s" if took is not None else "not finished",
        f"about {pred:.1f} s (planner)" if pred is not None else "finished",
        [],
        None
        if ok
        else "the rollout took far longer than planned: pods start slower than "
        "assumed, or old pods drain past the grace period",
    )


def ttft_recovers_after_step(d: RunData, window_s: float = 1.0) -> CheckResult:
    """After a load step, how long TTFT breaks its SLO (p90 per window) before recovering."""
    if d.t_act is None:
        return CheckResult("ttft_recovers_after_step", False, "no load step", "a load step")
    after = sorted(
        (r for r in d.records if r.sent_at >= d.t_act and r.ttft_s is not None),
        key=lambda r: r.sent_at,
    )
    windows: dict[int, list[float]] = {}
    for r in after:
        windows.setdefault(int((r.sent_at - d.t_act) // window_s), []).append(r.ttft_s)
    last_bad = None
    for w, vals in sorted(windows.items()):
        vals.sort()
        if vals[min(len(vals) - 1, int(0.9 * len(vals)))] > d.ttft_slo_s:
            last_bad = w
    breach_s = 0.0 if last_bad is None else (last_bad + 1) * window_s
    ok = breach_s <= d.recovery_budget_s and bool(windows)
    return CheckResult(
        "ttft_recovers_after_step",
        ok,
        f"TTFT over SLO for {breach_s:.1f} s after the step",
        f"<= {d.recovery_budget_s} s",
        [],
        None
        if ok
        else "new replicas take too long to serve after a load step: startup time "
        "(weights) plus the autoscaler's reaction; scale on queue length or in-flight requests, "
        "keep headroom, or cut startup time",
    )


def capacity_floor_for(max_surge: str, max_unavailable: str) -> Callable[[RunData], CheckResult]:
    """capacity_floor with the floor of a given rollout strategy."""
    from harness.cluster.config import Strategy

    def capacity_floor_of_strategy(d: RunData) -> CheckResult:
        _, unavailable = Strategy(max_surge, max_unavailable).resolve(d.replicas)
        return capacity_floor(dataclasses.replace(d, max_unavailable=unavailable))

    return capacity_floor_of_strategy


def scaled_to_zero(d: RunData) -> CheckResult:
    """The autoscaler did scale the replica to zero (the scenario's premise)."""
    decisions = [e for e in d.events if e.kind == "autoscaler_decision"]
    ok = bool(decisions) and d.t_recovered is not None
    return CheckResult(
        "scaled_to_zero",
        ok,
        f"{decisions[0].detail.get('policy')} scaler went to zero" if ok else "still running",
        "zero replicas once idle",
        [],
        None if ok else "the replica was never scaled to zero within the recovery time",
    )
