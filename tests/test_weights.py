"""weighted_canary's arithmetic from literal records, and the local gateway's split by
weight on a real nginx."""

from __future__ import annotations

import time
from collections import Counter

import httpx
import pytest

from harness.cluster.local.nginx import Nginx, Split
from harness.events import Event
from harness.proc import free_port
from harness.streams import Outcome, StreamRecord
from harness.weights import (
    Step,
    Window,
    candidate_replicas,
    judge_step,
    split_tolerance,
    windows,
)


def rec(i: int, version: str, t: float, ttft: float = 0.05, outcome=Outcome.COMPLETE):
    return StreamRecord(
        request_id=f"r{i}",
        outcome=outcome,
        sent_at=t,
        duration_s=1.0,
        status=200,
        ttft_s=ttft,
        itl_p50_s=0.02,
        version=version,
    )


@pytest.mark.unit
def test_the_tolerance_is_ten_points_or_three_sigmas():
    # the conformance test's own case: 200 requests at 30%: 3 sigma = 9.7 points < 10
    assert split_tolerance(0.3, 200) == pytest.approx(0.10)
    # few requests: 3 sigma of 20 at 50% is 33.5 points
    assert split_tolerance(0.5, 20) == pytest.approx(3 * (0.25 / 20) ** 0.5)
    assert split_tolerance(0.1, 0) == float("inf")


@pytest.mark.unit
def test_a_step_ends_on_the_streams_its_weight_needs_not_on_the_candidates_luck():
    step = lambda percent, n, cand: Step(percent, 0, 1, requests=n, candidate=cand)  # noqa: E731
    # the demo's 10% step: 12 of the first 51 streams were the candidate's; it goes on
    assert not step(10, 51, 12).has_enough(10)
    assert not step(10, 100, 9).has_enough(10)  # the count reached, the candidate's not
    assert step(10, 100, 10).has_enough(10)
    assert step(50, 20, 10).has_enough(10) and not step(50, 19, 12).has_enough(10)
    assert step(100, 10, 10).has_enough(10)
    assert step(30, 67, 20).has_enough(20) and not step(30, 66, 20).has_enough(20)


@pytest.mark.unit
def test_the_candidate_scales_with_its_weight():
    assert [candidate_replicas(p, 3) for p in (10, 34, 50, 67, 100)] == [1, 2, 2, 3, 3]
    assert candidate_replicas(1, 10) == 1  # at least one


@pytest.mark.unit
def test_windows_run_from_the_gateways_applying_each_weight():
    def upd(t, percent=None):
        split = {"split": {"percent": percent, "version": "v2"}} if percent is not None else {}
        return Event(t=t, kind="gateway_updated", detail={"endpoints": [], **split})

    events = [upd(1.0), upd(2.0, 10), upd(3.0, 10), upd(5.0, 50), upd(9.0, 0), upd(10.0)]
    # an endpoint change at 10% (t=3) goes on in the 10% window; 0% is no step
    assert windows(events, t_end=20.0) == [Window(10, 2.0, 5.0), Window(50, 5.0, 9.0)]
    assert windows(events[:4], t_end=8.0)[-1] == Window(50, 5.0, 8.0)


@pytest.mark.unit
def test_a_window_ends_when_the_next_weight_is_asked_for():
    """A gateway routes by either weight between a change asked for and its applying it
    (Traefik: up to 2 s after the route's status says Accepted): those streams belong to
    no window."""

    def upd(t, percent):
        return Event(t=t, kind="gateway_updated", detail={"split": {"percent": percent}})

    def ask(t, percent):
        return Event(t=t, kind="action", detail={"action": "canary_weight", "percent": percent})

    events = [ask(1.0, 10), upd(2.0, 10), ask(6.0, 100), upd(9.0, 100), ask(12.0, None)]
    events += [upd(15.0, 0)]
    assert windows(events, t_end=20.0) == [Window(10, 2.0, 6.0), Window(100, 9.0, 12.0)]


def mixed(n: int, every: int, t0: float = 10.0, cand_ttft: float = 0.05, noise: bool = True):
    """n streams sent 0.1 s apart, each `every`-th to the candidate v2."""
    out = []
    for i in range(n):
        v = "v2" if i % every == 0 else "v1"
        jitter = (i % 7) * 0.003 if noise else 0.0
        out.append(rec(i, v, t0 + i * 0.1, (cand_ttft if v == "v2" else 0.05) + jitter))
    return out


@pytest.mark.unit
def test_a_healthy_candidate_at_its_weight_passes():
    records = mixed(400, 10)  # 40 of 400: 10%
    step = judge_step(Window(10, 10.0, 60.0), records, "v2", min_sample=20)
    assert step.status == "pass", step.to_dict()
    assert step.share == pytest.approx(0.1) and step.split_ok
    assert "(within ±10 points)" in step.split_text()


@pytest.mark.unit
def test_a_candidate_three_times_slower_to_first_token_fails_its_step():
    records = mixed(400, 10, cand_ttft=0.15)
    step = judge_step(Window(10, 10.0, 60.0), records, "v2", min_sample=20)
    assert step.status == "fail"
    assert any(r.startswith("TTFT median 15") for r in step.reasons), step.reasons
    assert step.compared["TTFT"]["change"] == "worse"


@pytest.mark.unit
def test_a_split_far_off_its_weight_fails_though_the_candidate_is_healthy():
    records = mixed(300, 2)  # half the streams at a weight of 10%
    step = judge_step(Window(10, 10.0, 60.0), records, "v2", min_sample=20)
    assert step.split_ok is False and step.status == "fail" and not step.reasons
    assert "off by more than ±10 points" in step.split_text()


@pytest.mark.unit
def test_a_broken_candidate_stream_fails_the_step():
    records = mixed(400, 10)
    records[10] = rec(10, "v2", records[10].sent_at, outcome=Outcome.RESET)
    step = judge_step(Window(10, 10.0, 60.0), records, "v2", min_sample=20)
    assert step.status == "fail" and step.broken == 1
    assert "reset" in step.reasons[0]


@pytest.mark.unit
def test_too_few_candidate_streams_cannot_tell_and_streams_outside_the_window_do_not_count():
    records = mixed(400, 10)
    step = judge_step(Window(10, 10.0, 15.0), records, "v2", min_sample=20)  # 50 streams
    assert step.requests == 50 and step.candidate == 5
    assert step.status == "cannot_tell" and "fewer than 20" in step.unknown[0]


@pytest.mark.unit
def test_at_full_weight_the_candidate_is_held_to_the_baseline_before_the_steps():
    before = [rec(i, "v1", 1.0 + i * 0.1, 0.05 + (i % 5) * 0.002) for i in range(60)]
    slow = [rec(100 + i, "v2", 20.0 + i * 0.1, 0.2 + (i % 5) * 0.002) for i in range(60)]
    step = judge_step(Window(100, 20.0, 30.0), slow, "v2", reference=before, min_sample=20)
    assert step.against == "the baseline's streams before the steps"
    assert step.status == "fail" and step.share == 1.0 and step.split_ok


@pytest.mark.unit
def test_untraced_streams_are_counted_apart():
    records = mixed(200, 10)
    for r in records[:20]:
        r.version = None
    step = judge_step(Window(10, 0.0, 100.0), records, "v2", min_sample=5)
    assert step.untraced == 20 and step.requests == 180


# --- the two checks, on literal run data -------------------------------------------------


def weighted_result(action="promoted", golden_status="pass") -> dict:
    golden = {"status": golden_status, "observed": "8 of 8 agree", "reasons": []}
    golden |= {"prompts_compared": 8, "mode": "same", "expected": "agree"}
    return {"version": "v2", "action": action, "golden": golden, "min_samples": 20}


def split_events(*steps: tuple[float, float]) -> list[Event]:
    detail = lambda p: {"endpoints": [], "split": {"version": "v2", "percent": p}}  # noqa: E731
    return [Event(t=t, kind="gateway_updated", detail=detail(p)) for t, p in steps]


@pytest.mark.unit
def test_the_checks_judge_every_step_again_on_the_final_records():
    from harness import checks as C
    from tests.test_verdict import data, status

    events = split_events((10.0, 10), (50.0, 0))
    good = data(mixed(400, 10), events, t_end=60.0)
    result = weighted_result()
    assert status(C.weighted_split(result)(good)) == "pass"
    said = C.weighted_candidate(result)(good)
    assert status(said) == "pass" and "at 10%; promoted" in said.observed

    slow = data(mixed(400, 10, cand_ttft=0.15), events, t_end=60.0)
    said = C.weighted_candidate(weighted_result("rolled back at 10%"))(slow)
    assert status(said) == "fail" and said.observed.startswith("at 10%: TTFT median")
    assert said.observed.endswith("; rolled back at 10%")

    # rolled back live on a step the final records pass: not a PASS
    live = weighted_result("rolled back at 10%")
    live["steps"] = [{"percent": 10, "reasons": ["TTFT median 90 ms against 50 ms"]}]
    said = C.weighted_candidate(live)(good)
    assert status(said) == "inconclusive" and "do not confirm" in said.reason

    off = data(mixed(300, 2), events, t_end=60.0)
    said = C.weighted_split(result)(off)
    assert status(said) == "fail" and "off by more than" in said.observed
    assert "selector of its own" in said.hint
    assert status(C.weighted_candidate(result)(off)) == "pass"  # the candidate is fine

    # no weight ever applied; golden answers that diverged
    none = data(mixed(100, 10), [], t_end=60.0)
    stopped = weighted_result("rolled back before any traffic", golden_status="fail")
    assert status(C.weighted_split(stopped)(none)) == "inconclusive"
    said = C.weighted_candidate(stopped)(none)
    assert status(said) == "fail" and said.observed.startswith("golden answers:")
    # too few of the candidate's streams to compare: cannot tell
    few = data(mixed(100, 10), split_events((10.0, 10), (12.0, 0)), t_end=60.0)
    assert status(C.weighted_candidate(result)(few)) == "inconclusive"


# --- the local gateway's split, on a real nginx ------------------------------------------


def served_by(gw: Nginx, n: int) -> Counter:
    seen: Counter = Counter()
    with httpx.Client(timeout=10) as c:
        for _ in range(n):
            r = c.get(gw.url + "/version")
            seen[r.json()["version"].split()[-1] if r.status_code == 200 else r.status_code] += 1
    return seen


def apply(gw: Nginx, endpoints: list[str], split: Split | None) -> None:
    gw.set_endpoints(endpoints, split)
    deadline = time.monotonic() + 10
    while (gw.applied, gw.applied_split) != (tuple(sorted(endpoints)), split):
        assert time.monotonic() < deadline, "the split was never applied"
        time.sleep(0.01)


@pytest.mark.process
def test_nginx_splits_by_weight_and_answers_an_empty_backends_share_503(sim_factory, tmp_path):
    a, b = sim_factory(model_version="v1"), sim_factory(model_version="v2")
    stable, cand = f"127.0.0.1:{a.settings.port}", f"127.0.0.1:{b.settings.port}"
    seen_updates: list[dict] = []
    emit = lambda kind, **detail: seen_updates.append(detail)  # noqa: E731
    gw = Nginx(tmp_path, free_port(), endpoint_delay_s=0, read_timeout_s=30, emit=emit)
    gw.start()
    try:
        apply(gw, [stable, cand], Split("v2", 30, (cand,), (stable,)))
        seen = served_by(gw, 300)
        share = seen["v2"] / 300
        assert set(seen) == {"v1", "v2"}
        assert abs(share - 0.3) <= split_tolerance(0.3, 300), seen
        for percent, only in ((100, "v2"), (0, "v1")):
            apply(gw, [stable, cand], Split("v2", percent, (cand,), (stable,)))
            assert served_by(gw, 20) == Counter({only: 20})
        # the candidate's pool empty (its pod not ready): its share gets 503
        apply(gw, [stable], Split("v2", 50, (), (stable,)))
        seen = served_by(gw, 60)
        assert set(seen) == {"v1", 503} and seen[503] > 10, seen
        # no split: every endpoint alike again
        apply(gw, [stable, cand], None)
        assert set(served_by(gw, 20)) == {"v1", "v2"}
        splits = [u["split"] for u in seen_updates if "split" in u]
        assert [s["percent"] for s in splits] == [30, 100, 0, 50]
    finally:
        gw.stop()


@pytest.mark.process
def test_the_local_target_gives_the_candidate_its_weight_and_puts_the_routes_back(tmp_path):
    from harness.cluster.local import LocalTarget
    from harness.config.schema import load_config
    from tests.test_local_target import FAST

    t = LocalTarget(load_config(None, [*FAST, "replicas=2"]), tmp_path / "t")
    t.start()
    try:
        t.wait_settled(2, 30)
        t.start_candidate("v2")
        t.wait_for(lambda: any(p.version == "v2" for p in t.ready_pods()), 30, "v2 ready")
        # ready, yet given no traffic before its first step
        t.wait_for(
            lambda: (t.gateway.applied_split or Split("", 0, (), ())).candidate, 10, "a split"
        )
        assert t.gateway.applied_split.percent == 0 and set(served_by(t.gateway, 20)) == {"v1"}
        t.set_weight(50)
        t.wait_for(lambda: t.gateway.applied_split.percent == 50, 10, "the weight applied")
        assert set(served_by(t.gateway, 40)) == {"v1", "v2"}
        t.set_mirror(100)  # and every request copied to it (shadow)
        t.wait_for(lambda: t.gateway.applied_split.mirror == 100, 10, "the mirror applied")
        assert t.gateway.applied_split.percent == 50  # the weight kept
        t.scale_candidate(2)
        t.wait_for(lambda: sum(p.version == "v2" for p in t.ready_pods()) == 2, 30, "two of v2")
        # roll back: no traffic to the candidate, its pods gone, the routes as they were
        t.set_weight(0)
        t.rollback_canary()
        t.wait_for(
            lambda: t.rollout_done() and {p.version for p in t.pods()} == {"v1"},
            30,
            "the candidate gone",
        )
        t.end_split()
        t.wait_for(lambda: t.gateway.applied_split is None, 10, "the split removed")
        assert set(served_by(t.gateway, 20)) == {"v1"}
        assert (t.gateway.dir / "mirror.conf").read_text() == "return 204;\n"  # no mirror
        assert len(t.gateway.applied) == 2
    finally:
        t.close()
