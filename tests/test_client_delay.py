"""The load generator's own delay, from literal histograms: how it is kept, per phase,
and what a saturated client does to the verdict (the latency budgets it could decide are
INCONCLUSIVE; broken streams still FAIL; compare claims no change within it)."""

from __future__ import annotations

import json

import pytest

from harness import checks as C
from harness import client_delay as CD
from harness import verdict as V
from harness.significance import latency_change
from tests.test_verdict import T, data, rec

pytestmark = pytest.mark.unit


def test_buckets_never_understate_and_are_at_most_ten_percent_wide():
    for lag in (0.0, 5e-5, 1e-4, 0.00123, 0.02, 0.3, 7.5):
        k = CD.bucket(lag)
        assert CD.upper(k) >= lag
        assert k == 0 or CD.upper(k - 1) < lag <= CD.upper(k) <= max(lag, CD.FLOOR_S) * 1.1


def test_quantiles_of_a_histogram():
    hist: dict[int, int] = {}
    for lag in [0.001] * 98 + [0.2, 0.5]:
        hist[CD.bucket(lag)] = hist.get(CD.bucket(lag), 0) + 1
    assert 0.001 <= CD.quantile(hist, 0.5) <= 0.0011
    assert 0.2 <= CD.quantile(hist, 0.99) <= 0.22  # the 99th of 100 samples
    assert 0.5 <= CD.quantile(hist, 1.0) <= 0.55
    assert CD.quantile({}, 0.99) is None


def test_windows_close_each_second_with_the_cpu_share_of_it():
    now, cpu = [100.2], [10.0]
    w = CD.Windows(clock=lambda: now[0], cpu=lambda: cpu[0])
    w.add(0.001)
    w.add(0.003)
    now[0], cpu[0] = 101.2, 10.5  # half a core over that second
    w.add(0.05)
    (first,) = w.take()
    assert first["t"] == 100 and sum(first["h"].values()) == 2 and first["max_s"] == 0.003
    assert first["cpu"] == 0.5
    assert w.take() == []  # the open second stays until it closes, or the last take
    (last,) = w.take(final=True)
    assert last["t"] == 101 and last["max_s"] == 0.05
    assert w.take(final=True) == []


def test_a_window_keeps_the_sockets_waits_beside_the_timers():
    now = [100.2]
    w = CD.Windows(clock=lambda: now[0], cpu=lambda: 0.0)
    w.arrived(0.2)
    w.arrived(0.01)
    now[0] = 101.1
    w.add(0.001)  # a new second closes the last, which had only the socket's waits
    (first,) = w.take()
    assert first["h"] == {} and sum(first["a"].values()) == 2 and first["a_max_s"] == 0.2
    (last,) = w.take(final=True)
    assert "a" not in last and sum(last["h"].values()) == 1


def test_by_phase_reads_each_second_in_the_phase_of_its_middle(tmp_path):
    phases = V.Phases(t_start=T - 10, t_act=T, t_recovered=T + 5, t_end=T + 10)
    lines = [
        {"t": int(T) - 3, "h": {str(CD.bucket(0.001)): 50}, "max_s": 0.001, "cpu": 0.2},
        {"t": int(T) + 1, "h": {str(CD.bucket(0.4)): 50}, "max_s": 0.45, "cpu": 0.97},
        {"t": int(T) + 7, "h": {str(CD.bucket(0.002)): 50}, "max_s": 0.002, "cpu": 0.3},
    ]
    (tmp_path / "load").mkdir()
    with (tmp_path / "load" / CD.FILE).open("w") as f:
        for i, line in enumerate(lines):
            f.write(json.dumps(line | {"worker": f"w{i % 2}"}) + "\n")
        f.write("not json\n")
    got = CD.by_phase(CD.read(tmp_path), phases.at)
    assert set(got) == {"before", "during", "after", "all"}
    assert got["during"]["p99_s"] >= 0.4 and got["during"]["cpu_max"] == 0.97
    assert got["before"]["p99_s"] < 0.0012 and got["all"]["workers"] == 2
    assert got["all"]["samples"] == 150 and got["all"]["max_s"] == 0.45
    assert CD.read(tmp_path / "nothing") == []


def delay(before=0.002, during=0.002, after=0.002, cpu=0.3, worst=None) -> dict:
    def one(p99):
        return {"p99_s": p99, "max_s": worst or p99, "cpu_max": cpu, "samples": 500, "workers": 1}

    out = {"before": one(before), "during": one(during), "after": one(after)}
    return out | {"all": one(max(before, during, after))}


def ttft_run(ttfts_during, client, **kw):
    """10 requests before, the given TTFTs during, 10 after (TTFT SLO 1 s: limit 250 ms)."""
    records = [rec(f"b{i}", sent=T - 5 + i * 0.1, dur=1) for i in range(10)]
    records += [
        rec(f"d{i}", sent=T + 1 + i * 0.1, dur=1, ttft=t) for i, t in enumerate(ttfts_during)
    ]
    records += [rec(f"a{i}", sent=T + 6 + i * 0.1, dur=1) for i in range(10)]
    return data(records, client_delay=client, **kw)


def verdict_of(d: V.RunData, checks) -> tuple[str, dict]:
    results = V.judge(d, checks)
    return V.verdict(results), {r.name: r for r in results}


LATENCY = [C.no_broken_streams, C.client_kept_up, C.slo_budget_for("ttft")]


def test_a_client_that_kept_up_changes_nothing():
    d = ttft_run([1.2] * 4 + [0.1] * 6, delay())  # 40% over the SLO during: a real breach
    word, by = verdict_of(d, LATENCY)
    assert word == "fail" and by["ttft_slo_budget"].status == V.Status.FAIL
    assert by["client_kept_up"].status == V.Status.PASS
    assert "p99 2 ms" in by["client_kept_up"].observed["during"]


def test_a_breach_within_a_saturated_clients_delay_is_inconclusive_not_a_failure():
    # the client ran 400 ms late at p99 while the disruption ran (limit: 250 ms): four
    # requests 0.2 s over the SLO may be the client's own 0.4 s
    d = ttft_run([1.2] * 4 + [0.1] * 6, delay(during=0.4, cpu=0.98))
    word, by = verdict_of(d, LATENCY)
    assert word == "inconclusive"
    budget, client = by["ttft_slo_budget"], by["client_kept_up"]
    assert budget.status == V.Status.INCONCLUSIVE and C.SATURATED in budget.reason
    assert client.status == V.Status.INCONCLUSIVE
    assert "during: p99 400 ms, CPU up to 98%" in client.reason
    assert "ttft_slo_budget could not be judged" in client.reason
    assert "the load needed about 2 workers (load.workers: 2" in client.reason
    assert by["no_broken_streams"].status == V.Status.PASS


def test_a_breach_beyond_the_clients_delay_still_fails():
    d = ttft_run([3.0] * 4 + [0.1] * 6, delay(during=0.4))  # 2 s over: not the client's 0.4
    word, by = verdict_of(d, LATENCY)
    assert word == "fail" and by["ttft_slo_budget"].status == V.Status.FAIL
    assert "4 by more than the client's delay" in by["ttft_slo_budget"].observed["during"]
    # nothing turned on the delay: the check passes, and still shows it over its limit
    assert by["client_kept_up"].status == V.Status.PASS
    assert "over the limit" in by["client_kept_up"].observed["note"]


def test_a_saturated_client_does_not_mend_a_broken_stream():
    d = ttft_run([1.2] * 4 + [0.1] * 6, delay(during=0.4))
    d.records[12].outcome = "truncated"
    word, by = verdict_of(d, LATENCY)
    assert word == "fail" and by["no_broken_streams"].status == V.Status.FAIL
    assert by["ttft_slo_budget"].status == V.Status.INCONCLUSIVE


def test_an_itl_budget_broken_while_the_client_lagged_is_not_judged():
    records = [rec(f"r{i}", sent=T - 5 + i, dur=1, itl_max_s=0.3) for i in range(15)]
    itl = C.slo_budget_for("itl")
    lagged = data(records, itl_slo_s=0.1, client_delay=delay(0.08, 0.08, 0.08, worst=0.25))
    assert itl(lagged).status == V.Status.INCONCLUSIVE  # its limit: 25 ms (a quarter of 0.1 s)
    calm = data(records, itl_slo_s=0.1, client_delay=delay())
    assert itl(calm).status == V.Status.FAIL
    held = [rec(f"r{i}", sent=T - 5 + i, dur=1, itl_max_s=0.02) for i in range(15)]
    assert itl(data(held, itl_slo_s=0.1, client_delay=delay(0.08, 0.08, 0.08))).passed


def test_without_delay_figures_the_check_is_skipped():
    d = ttft_run([0.1] * 10, None)
    assert C.client_kept_up(d).status == V.Status.SKIPPED
    assert V.verdict(V.judge(d, LATENCY)) == "pass"


def test_a_busy_machine_is_told_from_a_busy_worker():
    d = ttft_run([1.2] * 4 + [0.1] * 6, delay(during=0.4, cpu=0.3))
    reason = C.client_kept_up(d).reason
    assert "used at most 30% of a core, so the machine under them was busy" in reason


def test_a_step_that_recovers_within_the_clients_delay_is_not_judged():
    records = [rec(f"s{i}", sent=T + i * 0.2, dur=1, ttft=1.3) for i in range(30)]
    records += [rec("end", sent=T + 8, dur=1, ttft=0.1)]
    budget = dict(recovery_budget_s=3.0)
    assert C.ttft_recovers_after_step(data(records, **budget)).status == V.Status.FAIL
    lagged = data(records, client_delay=delay(during=0.4, after=0.4), **budget)
    result = C.ttft_recovers_after_step(lagged)
    assert result.status == V.Status.INCONCLUSIVE and C.SATURATED in result.reason


def test_compare_claims_no_change_within_the_clients_own_delay():
    base = [0.021 + i * 1e-5 for i in range(40)]
    cand = [0.025 + i * 1e-5 for i in range(40)]  # 4 ms slower: 19%, p far below 0.01
    assert latency_change(base, cand)[0] == "worse"
    assert latency_change(base, cand, (0.0013, None))[0] == "worse"  # 4 ms > 2 x 1.3 ms
    said, how = latency_change(base, cand, (0.0013, 0.0041))
    assert said == "" and "under 2 times the client's own delay (p99 1.3 ms and 4.1 ms)" in how


def test_a_short_phase_of_a_lagging_run_is_not_taken_to_have_kept_up():
    """A drain of a second or two reads a few dozen wake-ups: under the limit there says
    little when the client lagged before and after it. Its ITL budget is not judged; a
    phase with figures of its own is judged by them."""
    records = [rec(f"r{i}", sent=T + 0.1 * i, dur=1, itl_max_s=0.3) for i in range(15)]
    itl = C.slo_budget_for("itl")
    client = delay(before=0.017, during=0.009, after=0.072)
    client["during"]["samples"] = 46
    d = data(records, itl_slo_s=0.05, client_delay=client)  # limit 12.5 ms
    assert set(d.client_lagged()) == {"before", "during", "after"}
    assert d.client_lagged()["during"] == client["all"]  # the run's figures speak for it
    assert itl(d).status == V.Status.INCONCLUSIVE
    client["during"]["samples"] = 500  # 10 s of its own figures, under the limit: judged
    d = data(records, itl_slo_s=0.05, client_delay=client)
    assert "during" not in d.client_lagged()
    assert itl(d).status == V.Status.FAIL


def test_answers_waiting_in_their_sockets_count_though_the_timer_kept_up():
    """The timer woke on time, yet each piece of an answer waited 400 ms in its socket
    (the kernel's receive time to the read): the client's delay is the larger measure,
    and the check names it."""
    lines = [
        {
            "t": int(T) + s,
            "h": {str(CD.bucket(0.001)): 50},
            "max_s": 0.001,
            "a": {str(CD.bucket(0.4)): 300},
            "a_max_s": 0.41,
            "cpu": 0.98,
        }
        for s in (-3, -2, 1, 2, 7, 8)
    ]
    phases = V.Phases(t_start=T - 10, t_act=T, t_recovered=T + 5, t_end=T + 10)
    got = CD.by_phase(lines, phases.at)
    assert got["during"]["loop_p99_s"] < 0.0012 and 0.4 <= got["during"]["arrival_p99_s"] < 0.45
    assert got["during"]["p99_s"] == got["during"]["arrival_p99_s"]
    assert got["all"]["max_s"] == 0.41 and got["all"]["samples"] == 300
    d = ttft_run([1.2] * 4 + [0.1] * 6, got)
    word, by = verdict_of(d, LATENCY)
    assert word == "inconclusive" and by["ttft_slo_budget"].status == V.Status.INCONCLUSIVE
    assert "during: p99 4" in by["client_kept_up"].reason
    assert "of answers waiting in their sockets, CPU up to 98%" in by["client_kept_up"].reason
    without = CD.summarize([{k: v for k, v in w.items() if k[0] != "a"} for w in lines])
    assert without["arrival_p99_s"] is None and without["p99_s"] == without["loop_p99_s"]
