"""The engines as a third witness: counter windows from literal /metrics reads, and the
check that holds the engines' endings against the clients' records."""

from __future__ import annotations

import pytest

from harness import checks
from harness.engine_counts import EngineCounts
from harness.prometheus import parse_metrics
from harness.streams import Outcome, StreamRecord
from harness.verdict import RunData, Status

pytestmark = pytest.mark.unit


def metrics(stop=0, length=0, abort=0, error=0, running=0, waiting=0) -> dict:
    lines = [
        f'vllm:request_success_total{{engine="0",finished_reason="{r}",model_name="m"}} {n}'
        for r, n in (("stop", stop), ("length", length), ("abort", abort), ("error", error))
    ]
    lines += [
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}',
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}',
    ]
    return parse_metrics("\n".join(lines))


def test_a_window_counts_increases_from_the_first_read_across_a_restart():
    c = EngineCounts(t_start=100.0)
    c.sample(100.0, "a", created_at=10.0, metrics=metrics(length=40, abort=2))  # before: not ours
    c.sample(101.0, "a", created_at=10.0, metrics=metrics(length=45, abort=2))
    c.sample(102.0, "a", created_at=10.0, metrics=metrics(length=1))  # restarted: from 0
    c.sample(101.5, "b", created_at=101.0, metrics=metrics(length=3, abort=1))  # new: all ours
    assert c.finished() == {"abort": 1, "length": 9}
    c.sample_gauges(99.0, 2, 0)
    c.sample_gauges(101.0, 1, 3)
    assert c.around(100.0) == {
        "before": {"running": 2, "waiting": 0, "t": -1.0},
        "after": {"running": 1, "waiting": 3, "t": 1.0},
    }


def record(outcome: Outcome) -> StreamRecord:
    return StreamRecord(request_id="r", outcome=outcome, sent_at=1.0, duration_s=1.0)


def run(records, finished: dict, sent: int | None = None) -> RunData:
    return RunData(
        records=records, events=[], access=[], errors=[],
        sent=len(records) if sent is None else sent, replicas=1, max_unavailable=0,
        stall_timeout_s=10, ttft_slo_s=1,
        engine_counts={"finished": finished, "pods": ["a"], "samples": 5, "at_act": None},
    )  # fmt: skip


def test_engine_aborts_no_client_saw_are_a_failure_and_cancels_explain_theirs():
    ok = [record(Outcome.COMPLETE)] * 3
    # the client cancelled one at the end: the engine's one abort is that
    calm = run([*ok, record(Outcome.CANCELLED)], {"length": 3, "abort": 1})
    assert checks.engine_counts_agree(calm).status == Status.PASS
    # every client record complete, yet the engine aborted one: lost on the way
    lost = run([*ok, record(Outcome.COMPLETE)], {"length": 3, "abort": 1})
    result = checks.engine_counts_agree(lost)
    assert result.status == Status.FAIL and "abort 1" in result.observed
    # more endings than the load sent: someone else uses these engines
    shared = run(ok, {"length": 9, "abort": 2})
    assert checks.engine_counts_agree(shared).status == Status.SKIPPED  # not a verdict
    unread = run(ok, {})
    unread.engine_counts = None
    assert checks.engine_counts_agree(unread).status == Status.SKIPPED
