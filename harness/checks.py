"""Verdicts: pure functions from joined run data to check results.

Each check says what it saw, what it expected, which requests broke it, and a
hint naming the likely misconfiguration (rules from shared/facts.md).
"""

from __future__ import annotations

from collections.abc import Sequence
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
    Outcome.HUNG: "streams stopped without an error and the client had to give up: an engine "
    "that stops sending at SIGTERM but keeps connections open (seen in vLLM's default abort "
    "mode); set --shutdown-timeout so it drains",
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
