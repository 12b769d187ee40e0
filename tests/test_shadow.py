"""shadow's parts: the engines' histograms read and compared, the three checks from
literal data, and the local gateway's mirror on a real nginx, with and without the
mirror reader (nginx's mirror alone aborts every mirrored stream after its headers)."""

from __future__ import annotations

import math
import time

import httpx
import pytest

from harness.cluster.local.nginx import Nginx, Split
from harness.histograms import ITL, TTFT, buckets, compare, count, increase, quantile
from harness.proc import free_port
from harness.prometheus import parse_metrics
from tests.test_verdict import data, rec, status

BOUNDS = (0.02, 0.04, 0.06, 0.08, 0.1, 0.25, math.inf)


def hist(*counts: int) -> list[tuple[float, float]]:
    """A cumulative histogram over BOUNDS from per-bucket counts."""
    out, running = [], 0
    for bound, n in zip(BOUNDS, counts, strict=True):
        running += n
        out.append((bound, float(running)))
    return out


@pytest.mark.unit
def test_buckets_are_read_from_prometheus_text_summed_over_engines():
    text = "\n".join(
        [
            f'{TTFT}_bucket{{engine="0",le="0.05",model_name="m"}} 3.0',
            f'{TTFT}_bucket{{engine="1",le="0.05",model_name="m"}} 2.0',
            f'{TTFT}_bucket{{engine="0",le="+Inf",model_name="m"}} 7.0',
            f'{TTFT}_count{{engine="0",model_name="m"}} 7.0',
        ]
    )
    assert buckets(parse_metrics(text), TTFT) == [(0.05, 5.0), (math.inf, 7.0)]
    assert buckets(parse_metrics(text), ITL) == []


@pytest.mark.unit
def test_a_windows_histogram_is_the_increase_and_its_quantiles_interpolate():
    before, after = hist(1, 1, 0, 0, 0, 0, 0), hist(1, 11, 10, 0, 0, 0, 0)
    window = increase(before, after)
    assert count(window) == 20
    # 10 in (0.02, 0.04], 10 in (0.04, 0.06]: the median at the bound between them
    assert quantile(window, 0.5) == pytest.approx(0.04)
    assert quantile(window, 0.75) == pytest.approx(0.05)
    # an engine that restarted (a bucket shrank) counts from 0 again
    assert count(increase(hist(0, 50, 0, 0, 0, 0, 0), hist(0, 3, 0, 0, 0, 0, 0))) == 3
    assert quantile([], 0.5) is None
    assert quantile(hist(0, 0, 0, 0, 0, 0, 4), 0.5) == 0.25  # in +Inf: the highest bound


@pytest.mark.unit
def test_two_engines_histograms_compared_beyond_their_noise():
    base = hist(0, 0, 200, 10, 0, 0, 0)  # about 50 ms
    slow = hist(0, 0, 0, 0, 10, 190, 0)  # about 150-250 ms
    assert compare(base, slow, 20)[0] == "worse"
    assert compare(slow, base, 20)[0] == "better"
    same = compare(base, hist(0, 0, 100, 6, 0, 0, 0), 20)
    assert same[0] == "" and "within the noise" in same[1]
    assert compare(base, hist(0, 0, 5, 0, 0, 0, 0), 20)[1].startswith("cannot tell")


def shadow_result(**kw) -> dict:
    golden = {"status": "pass", "observed": "8 of 8 agree", "reasons": []}
    golden |= {"prompts_compared": 8, "mode": "same", "expected": "agree"}
    as_rows = lambda h: [[b if b != math.inf else "+Inf", n] for b, n in h]  # noqa: E731
    base = {"status": "pass"}
    base |= {
        "version": "v2",
        "percent": 100,
        "window": [1000.0, 1010.0],
        "golden": golden,
        "mirrored": [],
        "candidate_finished": {},
        "histograms": {
            "baseline": {
                TTFT: as_rows(hist(0, 0, 200, 10, 0, 0, 0)),
                ITL: as_rows(hist(0, 300, 0, 0, 0, 0, 0)),
            },
            "candidate": {
                TTFT: as_rows(hist(0, 0, 100, 6, 0, 0, 0)),
                ITL: as_rows(hist(0, 200, 0, 0, 0, 0, 0)),
            },
        },
        "min_samples": 20,
    }
    return base | kw


def mirrored(n: int, status_of=lambda i: "200") -> list[dict]:
    return [
        {"request_id": f"r{i}", "status": 200, "upstream_status": status_of(i)} for i in range(n)
    ]


@pytest.mark.unit
def test_shadow_served_names_what_the_candidate_could_not_serve():
    from harness import checks as C

    records = [rec(f"r{i}", sent=1001 + i * 0.2, version="v1", pod="p1") for i in range(40)]
    d = data(records)
    ok = shadow_result(mirrored=mirrored(40), candidate_finished={"length": 40})
    said = C.shadow_served(ok)(d)
    assert status(said) == "pass"
    assert said.observed.startswith("the gateway mirrored 40 of 40 (100%)")

    refused = shadow_result(
        mirrored=mirrored(40, lambda i: "503" if i % 4 == 0 else "200"),
        candidate_finished={"length": 30},
    )
    said = C.shadow_served(refused)(d)
    assert (
        status(said) == "fail"
        and "could not serve 10 mirrored requests (10 answered 503" in said.observed
    )

    # nginx's mirror alone: every mirrored stream aborted right after its headers
    aborted = shadow_result(mirrored=mirrored(40), candidate_finished={"abort": 40})
    said = C.shadow_served(aborted)(d)
    assert status(said) == "fail" and "ended 40 abort" in said.observed
    assert "reads only the headers" in said.hint

    half = shadow_result(mirrored=mirrored(20), candidate_finished={"length": 20})
    assert "off its 100%" in C.shadow_served(half)(d).observed
    assert status(C.shadow_served(ok)(data([]))) == "inconclusive"


@pytest.mark.unit
def test_without_the_gateways_lines_the_share_is_the_candidate_engines_count():
    """A cluster's gateway keeps no line per mirrored request: what the candidate's
    engines took over the window is the share mirrored, and what they cut is named."""
    from harness import checks as C

    records = [rec(f"r{i}", sent=1001 + i * 0.2, version="v1", pod="p1") for i in range(40)]
    d = data(records)
    ok = shadow_result(mirrored=None, candidate_finished={"length": 38, "stop": 2})
    said = C.shadow_served(ok)(d)
    assert status(said) == "pass", said
    assert said.observed.startswith("v2's engines took 40 of 40 (100%)")
    assert "keeps no line per mirrored request" in said.observed

    # a mirror that reached the candidate for a third of the window
    few = shadow_result(mirrored=None, candidate_finished={"length": 13})
    said = C.shadow_served(few)(d)
    assert status(said) == "fail" and "took 13 of 40 (32%), off its 100%" in said.observed

    # what it took and cut counts as taken, and is named
    cut = shadow_result(mirrored=None, candidate_finished={"length": 30, "error": 10})
    said = C.shadow_served(cut)(d)
    assert status(said) == "fail" and "ended 10 error" in said.observed
    assert "took 40 of 40" not in said.observed  # the share itself was right


@pytest.mark.unit
def test_no_user_stream_may_come_from_the_shadow():
    from harness import checks as C

    clean = [rec(f"r{i}", version="v1", pod="p1") for i in range(10)]
    assert status(C.shadow_not_leaked(shadow_result())(data(clean))) == "pass"
    leaked = clean + [rec("x", version="v2", pod="c1"), rec("y", version="v2", pod="c1")]
    said = C.shadow_not_leaked(shadow_result())(data(leaked))
    assert status(said) == "fail" and said.observed.startswith("2 users' streams answered by v2")
    untraced = [rec("u")]
    assert status(C.shadow_not_leaked(shadow_result())(data(untraced))) == "inconclusive"


@pytest.mark.unit
def test_the_shadows_latency_is_judged_from_the_engines_histograms():
    from harness import checks as C

    assert status(C.shadow_candidate(shadow_result())(data([]))) == "pass"
    slow = shadow_result()
    slow["histograms"]["candidate"][TTFT] = [
        [b, n] for b, n in [[0.06, 0], [0.1, 2], [0.25, 60], ["+Inf", 60]]
    ]
    said = C.shadow_candidate(slow)(data([]))
    assert status(said) == "fail" and said.observed.startswith("TTFT median")
    few = shadow_result()
    few["histograms"]["candidate"][ITL] = [[0.04, 3], ["+Inf", 3]]
    assert status(C.shadow_candidate(few)(data([]))) == "inconclusive"


# --- the local gateway's mirror, on a real nginx ------------------------------------------


def finished(address: str) -> dict[str, float]:
    m = parse_metrics(httpx.get(f"http://{address}/metrics", timeout=5).text)
    key = "vllm:request_success_total["
    return {k[len(key) : -1]: v for k, v in m.items() if k.startswith(key)}


def apply(gw: Nginx, endpoints: list[str], split: Split) -> None:
    """The split set on the gateway, once nginx has applied it (within 10 s)."""
    gw.set_endpoints(endpoints, split)
    deadline = time.monotonic() + 10
    while gw.applied_split != split:
        assert time.monotonic() < deadline
        time.sleep(0.01)


@pytest.mark.process
@pytest.mark.parametrize("reads", [True, False], ids=["with-the-reader", "nginx-mirror-alone"])
def test_a_mirrored_stream_is_read_to_its_end_only_with_the_reader(sim_factory, tmp_path, reads):
    a = sim_factory(model_version="v1")
    b = sim_factory(model_version="v2", ttft_s=0.5)  # slower than the user's answer
    stable, cand = f"127.0.0.1:{a.settings.port}", f"127.0.0.1:{b.settings.port}"
    gw = Nginx(tmp_path, free_port(), 0, 30, mirror_reads_answers=reads)
    gw.start()
    try:
        apply(gw, [stable, cand], Split("v2", 0, (cand,), (stable,), mirror=100))
        body = {"model": a.settings.model, "messages": [{"role": "user", "content": "hi"}]}
        body |= {"max_tokens": 10, "stream": True}
        took = []
        for i in range(3):
            t0 = time.monotonic()
            with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, timeout=30,
                              headers={"X-Request-Id": f"m{i}"}) as r:  # fmt: skip
                assert r.headers["x-rollcheck-upstream"] == stable  # the user's from v1
                text = "".join(r.iter_text())
            took.append(time.monotonic() - t0)
            assert text.rstrip().endswith("data: [DONE]")
        # the user is never held by the mirror (v2 takes 0.5 s before its first token)
        assert max(took) < 0.5, took
        deadline = time.monotonic() + 10
        while sum(finished(cand).values()) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        if reads:
            assert finished(cand) == {"length": 3.0}
            lines = [ln for ln in gw.mirror_log.read_text().splitlines() if ln]
            assert len(lines) == 3 and all('"upstream_status":"200"' in ln for ln in lines)
        else:  # measured: nginx closes each mirrored answer after its headers
            assert finished(cand) == {"abort": 3.0}
    finally:
        gw.stop()


@pytest.mark.process
def test_a_request_mirrored_just_before_the_mirror_ends_still_reaches_the_candidate(
    sim_factory, tmp_path
):
    """The mirror reader answers nginx at once and forwards the request after: one
    mirrored just before the mirror is turned off reaches the candidate's server after
    nginx's reload. While the candidate is there, that server still passes it on (CI
    once logged it 503 from nginx itself, and shadow blamed the candidate)."""
    a = sim_factory(model_version="v1")
    b = sim_factory(model_version="v2")
    stable, cand = f"127.0.0.1:{a.settings.port}", f"127.0.0.1:{b.settings.port}"
    gw = Nginx(tmp_path, free_port(), 0, 30)
    gw.start()
    try:
        for mirror in (100, 0):  # on, then off with the candidate still there
            apply(gw, [stable, cand], Split("v2", 0, (cand,), (stable,), mirror=mirror))
        # what the reader sends the candidate's server for a request mirrored before
        body = {"model": a.settings.model, "messages": [{"role": "user", "content": "hi"}]}
        r = httpx.post(f"http://127.0.0.1:{gw.mirror_port}/v1/chat/completions",
                       json=body | {"max_tokens": 4}, headers={"X-Request-Id": "late"},
                       timeout=10)  # fmt: skip
        assert r.status_code == 200, r.text
        assert finished(cand) == {"length": 1.0}
    finally:
        gw.stop()


@pytest.mark.unit
def test_a_mirror_window_that_cannot_reach_its_least_is_a_config_error():
    from harness.config.schema import Shadow

    with pytest.raises(ValueError, match="window_max_s must be at least window_s"):
        Shadow(window_s=10, window_max_s=5).validate()
    Shadow(window_s=10, window_max_s=10).validate()
