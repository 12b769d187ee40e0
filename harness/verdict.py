"""The verdict layer: joined run data in, check results, a verdict and its account out.

No I/O. `Scenario.judge` gathers a RunData (records already joined with gateway
lines and cluster events) and calls `judge()`; every check is a pure function of
RunData, so each can be tested with literal data.

No evidence, no pass: every check states the population it judged. When that
population is empty or unknown the check is inconclusive and says why, and so is
the scenario (unless another check failed). A check whose data source was not
provided at all (gateway logs on a cluster without them) is skipped, and says so.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field

from harness.errors import RollcheckError
from harness.events import EventKind
from harness.streams import Outcome, StreamRecord
from harness.streams.summary import count_outcomes

MAX_LISTED = 200  # offending request ids kept per check
OK_OUTCOMES = (Outcome.COMPLETE, Outcome.CANCELLED)
# a killed pod's engine, seen dead on the target: it exited (the kubelet restarts it), its
# liveness probe gave up on it (frozen), or the pod was removed (replaced)
# what shows an engine dead; node_lost: the loss of its node (node_loss), as the target ran it
DEAD_EVIDENCE = (
    EventKind.EXITED,
    EventKind.PROBE_FAILED,
    EventKind.POD_REMOVED,
    EventKind.NODE_LOST,
)


class Status(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"  # the check saw no evidence either way
    SKIPPED = "skipped"  # its data source was not provided; not part of the verdict


class VerdictInputError(RollcheckError, ValueError):
    """Run data that cannot be judged (records of another run, nothing recorded)."""


@dataclass
class CheckResult:
    name: str
    status: Status
    observed: object
    expected: object
    population: str = ""  # what was judged: "3 of 3 streams in flight on pod-x at its SIGTERM"
    requests: list[str] = field(default_factory=list)
    hint: str | None = None  # for a failure: the likely misconfiguration
    reason: str | None = None  # for inconclusive or skipped: why, and what to change

    @property
    def passed(self) -> bool:
        return self.status == Status.PASS

    def to_dict(self) -> dict:
        return asdict(self) | {"passed": self.passed}


def passed(name, *, observed, expected, population) -> CheckResult:
    return CheckResult(name, Status.PASS, observed, expected, population)


def failed(name, *, observed, expected, population, bad=(), hint=None) -> CheckResult:
    ids = [r if isinstance(r, str) else r.request_id for r in list(bad)[:MAX_LISTED]]
    return CheckResult(name, Status.FAIL, observed, expected, population, ids, hint)


def inconclusive(name, *, expected, reason, observed="no evidence") -> CheckResult:
    return CheckResult(name, Status.INCONCLUSIVE, observed, expected, "none", reason=reason)


def skipped(name, *, expected, reason) -> CheckResult:
    return CheckResult(name, Status.SKIPPED, "not judged", expected, "none", reason=reason)


def judged(name, population_records, bad, population, expected=None, hint=None, empty=None):
    """The common shape: a population of records, the broken ones among them."""
    total = len(population_records)
    if not total:
        return inconclusive(
            name, expected=expected or "0 broken", reason=empty or f"no {population}"
        )
    observed = f"{len(bad)} of {total}"
    expected = expected or f"0 of {total}"
    if bad:
        return failed(
            name,
            observed=observed,
            expected=expected,
            population=f"{total} {population}",
            bad=bad,
            hint=hint,
        )
    return passed(name, observed=observed, expected=expected, population=f"{total} {population}")


# --- the data ----------------------------------------------------------------------


PHASES = ("before", "during", "after")
# a phase's own client-delay figure stands on at least this many timer wake-ups (2 s at
# harness.client_delay's 50 a second); fewer, and the run's figure speaks for it
MIN_PHASE_SAMPLES = 100


@dataclass
class Phases:
    """The scenario's clock: steady state, the disruption, recovery, the end of load."""

    t_start: float | None = None  # load started
    t_act: float | None = None  # the disruption
    t_recovered: float | None = None  # desired replicas ready again
    t_end: float | None = None  # load stopped

    def at(self, t: float) -> str:
        """The phase a moment belongs to."""
        if self.t_act is None or t < self.t_act:
            return "before"
        if self.t_recovered is None or t < self.t_recovered:
            return "during"
        return "after"


@dataclass
class RunData:
    records: list[StreamRecord]
    events: list  # harness.events.Event
    access: list  # harness.streams.GatewayLine, this run's request ids only
    errors: list  # harness.gateway_logs.ErrorLine joined to this run's lines
    sent: int
    replicas: int
    max_unavailable: int
    stall_timeout_s: float
    ttft_slo_s: float
    t_act: float | None = None
    t_recovered: float | None = None
    t_start: float | None = None
    t_end: float | None = None
    victims: list[str] = field(default_factory=list)
    # streams in flight on each victim by its engine's own metrics, just before the act
    victim_in_flight: dict[str, int] = field(default_factory=dict)
    recovery_budget_s: float = 60.0
    scaler_idle_s: float = 0.0  # how long the autoscaler waits for "idle" before it acts
    itl_slo_s: float | None = None
    slo_budgets: dict = field(default_factory=dict)  # {"ttft": {"before": 0.01, ...}, "itl": ...}
    predicted_rollout_s: float | None = None
    gateway_logs: str | None = None  # where gateway lines came from; None: no gateway logs
    engine_logs: int = 0  # how many pods' engine logs were read for their request lines
    unparsed_gateway_lines: int = 0
    first_unparsed_line: str | None = None
    expect_broken_on_victims: bool = False  # pod_kill: the victim's own streams may break
    outcome_total: int | None = None  # outcomes the load counted (accounting)
    load_problems: list[str] = field(default_factory=list)
    # what the engines counted (harness.engine_counts.EngineCounts.as_dict), or None
    engine_counts: dict | None = None
    # the load generator's own delay per phase and "all" (harness.client_delay.by_phase);
    # None: the load reported none
    client_delay: dict | None = None
    client_delay_share: float = 0.25  # slo.client_delay_share
    lost_node_routing_s: float = 10.0  # scenario.lost_node_routing_s

    @property
    def client_delay_limit_s(self) -> float:
        """The client delay (p99 in a phase) past which latency is not judged: a share of
        the tightest SLO in force (the ITL SLO when set, else the TTFT SLO)."""
        slos = [s for s in (self.ttft_slo_s, self.itl_slo_s) if s]
        return self.client_delay_share * min(slos)

    def client_lagged(self, phases: Sequence[str] = PHASES) -> dict[str, dict]:
        """The phases (of `phases`) in which the load generator's delay p99 passed its
        limit: their figures (p99_s, cpu_max, ...). A phase with fewer than
        MIN_PHASE_SAMPLES timer wake-ups of its own (a drain of a second or two) cannot
        say the client kept up there: when the client lagged over the run, it counts as
        lagged there too, with the run's figures (a CI run read 9 ms at p99 over 46
        wake-ups in a drain between phases at 17 and 72 ms, and the drain's ITL budget was
        judged as if the client had kept up)."""
        limit = self.client_delay_limit_s
        delay = self.client_delay or {}
        run = delay.get("all") or {}
        run_lagged = run.get("p99_s") is not None and run["p99_s"] > limit
        out = {}
        for p, s in delay.items():
            if p not in phases or s.get("p99_s") is None:
                continue
            if s["p99_s"] > limit:
                out[p] = s
            elif run_lagged and s.get("samples", 0) < MIN_PHASE_SAMPLES:
                out[p] = run
        return out

    @property
    def phases(self) -> Phases:
        return Phases(self.t_start, self.t_act, self.t_recovered, self.t_end)

    def counted_at(self, r: StreamRecord) -> float:
        """The moment a request's phase is read from: when it was sent, except a stream
        the disruption broke in flight (sent before the act, broken, ended at or after
        it), which counts at the act. The act cut it, not the steady state before:
        a pod_kill's cut streams belong to "during", and "before" stays the baseline."""
        if (
            self.t_act is not None
            and r.sent_at < self.t_act <= r.ended_at
            and r.outcome not in OK_OUTCOMES
        ):
            return self.t_act
        return r.sent_at

    def by_phase(
        self,
        records: Sequence[StreamRecord] | None = None,
        when: Callable[[StreamRecord], float] | None = None,
    ) -> dict[str, list]:
        """Records (all of the run's by default) grouped by phase: the phase of the moment
        `when` gives for each (by default, `counted_at`)."""
        phases = self.phases
        when = when or self.counted_at
        out: dict[str, list] = {p: [] for p in PHASES}
        for r in self.records if records is None else records:
            out[phases.at(when(r))].append(r)
        return out

    @property
    def any_traced(self) -> bool:
        return any(r.pod is not None for r in self.records)

    def untraced(self, records: Sequence[StreamRecord]) -> list[StreamRecord]:
        return [r for r in records if r.pod is None]

    @functools.cached_property
    def _seen_dead(self) -> dict[str, float]:
        """Each victim's first evidence of death at or after the act (read once: `struck`
        is asked for every record by several checks)."""
        out: dict[str, float] = {}
        if self.t_act is not None:
            for e in self.events:
                if e.pod in self.victims and e.kind in DEAD_EVIDENCE and e.t >= self.t_act:
                    out[e.pod] = min(e.t, out.get(e.pod, e.t))
        return out

    @functools.cached_property
    def _retried_kills(self) -> list[tuple[str, float, float]]:
        """oom_kill's act request sent again (scenario.oom_retries) and killing again:
        (pod, when it was sent, when the target showed the engine dead)."""
        sent = {
            (e.pod, e.detail["retry"]): e.t for e in self.events
            if e.kind == EventKind.ACTION and e.detail.get("action") == "oom_request"
            and e.detail.get("retry")
        }  # fmt: skip
        return [
            (e.pod, sent[(e.pod, e.detail["retry"])], e.detail.get("t", e.t))
            for e in self.events
            if e.kind == EventKind.ACTION and e.detail.get("action") == "retry_seen"
            and (e.pod, e.detail.get("retry")) in sent
        ]  # fmt: skip

    def struck(self, r: StreamRecord) -> bool:
        """pod_kill: a stream the kill itself cut, so allowed to break: on a victim and in
        flight at some moment from the kill until the target showed the victim dead (or
        from a retry of oom_kill's request until the kill it caused showed). A request
        that reached the dead pod afterwards is judged like any other."""
        if self.t_act is None or r.pod not in self.victims:
            return False
        dead = self._seen_dead.get(r.pod, self.t_act)
        if r.sent_at <= dead and r.ended_at >= self.t_act:
            return True
        return any(
            pod == r.pod and r.sent_at <= seen and r.ended_at >= sent
            for pod, sent, seen in self._retried_kills
        )

    def victim_time(self, pod: str, kinds=("sigterm",)) -> float | None:
        """When the disruption reached this pod: its first event of the first kind seen."""
        for kind in kinds:
            for ev in self.events:
                if ev.pod == pod and ev.kind == kind:
                    return ev.t
        return None


def in_flight_at(records: Sequence[StreamRecord], t: float) -> list[StreamRecord]:
    return [r for r in records if r.sent_at <= t < r.ended_at]


# --- attribution -------------------------------------------------------------------


def attribution(d: RunData) -> dict:
    """How many streams were traced to a pod, and why the others were not."""
    total = len(d.records)
    traced = sum(r.pod is not None for r in d.records)
    why: dict[str, int] = {}
    by: dict[str, int] = {}
    for r in d.records:
        if r.pod is not None:
            how = r.traced_by or "unknown"
            by[how] = by.get(how, 0) + 1
            continue
        if d.gateway_logs is None and not d.engine_logs:
            reason = "no gateway logs"
        elif d.gateway_logs is None:
            reason = "no gateway logs, and no engine log line with its request id"
        elif r.gateway is None:
            reason = "no gateway line with its request id"
        else:
            reason = "its upstream address matched no pod"
        why[reason] = why.get(reason, 0) + 1
    text = f"traced {traced} of {total} streams to a pod"
    if by:
        text += " (" + ", ".join(f"{k}: {v}" for k, v in sorted(by.items())) + ")"
    if total - traced:
        text += f"; {total - traced} untraced (" + ", ".join(f"{k}: {v}" for k, v in why.items())
        text += ")"
    if d.unparsed_gateway_lines:
        text += f"; {d.unparsed_gateway_lines} gateway lines unparsed"
    return {
        "traced": traced,
        "total": total,
        "untraced": total - traced,
        "why_untraced": why,
        "traced_by": by,
        "gateway_logs": d.gateway_logs,
        "engine_logs": d.engine_logs,
        "unparsed_gateway_lines": d.unparsed_gateway_lines,
        "first_unparsed_line": d.first_unparsed_line,
        "text": text,
    }


# --- the verdict -------------------------------------------------------------------

Check = Callable[[RunData], CheckResult]

ADVICE = (
    "to get evidence: more streams in flight (scenario.in_flight, load.users), longer "
    "answers (load.max_tokens, load.long_answer_tokens), or gateway logs so streams can "
    "be traced to pods (kube.gateway_log_files or kube.gateway_pods_selector)"
)


def validate(d: RunData) -> None:
    """One line for data that cannot be judged; nothing is counted twice."""
    ids = [r.request_id for r in d.records]
    if len(ids) != len(set(ids)):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise VerdictInputError(f"request {dup} has more than one record: records counted twice")
    if d.t_start is not None and d.t_end is not None:
        stray = [r for r in d.records if not d.t_start - 5 <= r.sent_at <= d.t_end + 5]
        if stray:
            raise VerdictInputError(
                f"{len(stray)} records were sent outside this run "
                f"(request {stray[0].request_id}): records from another run"
            )


def judge(d: RunData, checks: Sequence[Check]) -> list[CheckResult]:
    """Every check's result; then a check with a `settle` (one that judges what the
    others could judge, client_kept_up) reads theirs."""
    validate(d)
    results = [check(d) for check in checks]
    for check in checks:
        settle = getattr(check, "settle", None)
        if settle is not None:
            settle(results)
    return results


# worse is higher: a verdict that moves right is a regression (compare)
# a run's verdict is one of a check's statuses (Status): skipped, for a run, is one that
# ended before acting
VERDICT_RANK = {Status.PASS: 0, Status.SKIPPED: 1, Status.INCONCLUSIVE: 2, Status.FAIL: 3}


def overall(verdicts: Iterable[str], unreadable: bool = False) -> Status:
    """A session's verdict from its runs': fail beats inconclusive (also when a run could
    not be read) beats pass; only when every run was skipped (or none ran) is it skipped."""
    seen = set(verdicts)
    if Status.FAIL in seen:
        return Status.FAIL
    if Status.INCONCLUSIVE in seen or unreadable:
        return Status.INCONCLUSIVE
    return Status.SKIPPED if seen <= {Status.SKIPPED} else Status.PASS


def verdict(results: Sequence[CheckResult]) -> Status:
    """fail beats inconclusive beats pass; skipped checks do not count."""
    statuses = {r.status for r in results}
    if Status.FAIL in statuses:
        return Status.FAIL
    if Status.INCONCLUSIVE in statuses or not statuses - {Status.SKIPPED}:
        return Status.INCONCLUSIVE
    return Status.PASS


def describe_break(record: StreamRecord, ev, t0: float) -> str:
    """'sigterm (estimated) on pod-a at +0.41 s', saying when the stream's pod is unknown."""
    est = " (estimated)" if ev.detail.get("estimated") else ""
    untraced = "" if record.pod is not None else " (stream not traced to a pod; in flight then)"
    return f"{ev.kind}{est} on {ev.pod} at {ev.t - t0:+.2f} s{untraced}"


def failure_message(
    results: Sequence[CheckResult],
    d: RunData,
    title: str,
    report: str | None = None,
    warnings: Sequence[str] = (),
    breaking_event=None,
    listed: int = 5,
) -> str:
    """The verdict, failed and inconclusive checks, the first offending requests, hints.
    title: the scenario and the target ("drain on kube"); warnings: what was said before
    acting (the calibration's)."""
    t0 = d.t_act or (min((r.sent_at for r in d.records), default=0.0))
    by_id = {r.request_id: r for r in d.records}
    word = verdict(results)
    lines = [f"{title}: verdict {word.upper()}"]
    counts = ", ".join(f"{k} {v}" for k, v in count_outcomes(d.records).items() if v)
    lines.append(f"  outcomes: {counts or 'no requests'}")
    lines.append(f"  attribution: {attribution(d)['text']}")
    for check in results:
        if check.status == Status.INCONCLUSIVE:
            lines.append(f"  INCONCLUSIVE {check.name}: {check.reason}")
            continue
        if check.status != Status.FAIL:
            continue
        lines.append(
            f"  FAILED {check.name}: observed {check.observed}, expected {check.expected}"
            f" ({check.population})"
        )
        for rid in check.requests[:listed]:
            r = by_id.get(rid)
            if r is None:
                lines.append(f"    {rid}")
                continue
            ev = breaking_event(r, d.events, d.victims) if breaking_event else None
            cause = f"; {describe_break(r, ev, t0)}" if ev is not None else ""
            lines.append(
                f"    {rid[:12]} {r.outcome:<13} pod {r.pod or '?'} ({r.version or '?'}) "
                f"{r.sent_at - t0:+.2f} s .. {r.ended_at - t0:+.2f} s, {r.tokens} tokens{cause}"
            )
        if len(check.requests) > listed:
            lines.append(f"    ... and {len(check.requests) - listed} more")
        if check.hint:
            lines.append(f"    hint: {check.hint}")
    if word == "inconclusive":
        lines.append(f"  {ADVICE}")
    for warning in warnings:
        lines.append(f"  said before acting: {warning}")
    lines.append(f"  report: {report}")
    return "\n".join(lines)
