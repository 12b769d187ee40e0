"""A session's time before it starts: the estimate and the worst case from the config, and
what to drop or shorten when the worst case overruns a deadline."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.schema import load_config
from harness.estimate import outlook

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
NIGHTLY_DEADLINE_S = 21600  # the chart's nightly.deadlineSeconds
EVERY_RUN = [
    ("test_canary", "canary", {}),
    ("test_drain[node]", "drain", {}),
    ("test_drain[pod]", "drain", {}),
    ("test_pod_kill", "pod_kill", {}),
    ("test_rollout[surge1-unavail0]", "rollout", {"max_surge": "1", "max_unavailable": "0"}),
    ("test_rollout[surge2-unavail1]", "rollout", {"max_surge": "2", "max_unavailable": "1"}),
    ("test_rollout[blue-green]", "rollout", {"max_surge": "100%", "max_unavailable": "0"}),
    ("test_scale_down", "scale_down", {}),
    ("test_scale_to_zero", "scale_to_zero", {}),
    ("test_scale_up", "scale_up", {}),
    ("test_startup", "startup", {}),
]


def literal(tmp_path: Path, text: str):
    path = tmp_path / "rollcheck.yaml"
    path.write_text(text)
    return load_config(path, [])


def test_a_pod_kill_from_a_literal_config(tmp_path):
    cfg = literal(
        tmp_path,
        """
replicas: 2
engine: {startup_s: 4, ttft_s: 0.5, itl_s: 0.1}
load: {max_tokens: [{tokens: 100}], stop_timeout_s: 10}
slo: {stall_timeout_s: 5}
scenario: {settle_s: 50, warmup_s: 8, steady_state_s: 20, recovery_s: 100, cool_down_s: 5,
           gateway_log_wait_s: 3}
""",
    )
    (run,) = outlook([("test_pod_kill", "pod_kill", {})], cfg, "local").scenarios
    worst = {p.what: p.worst_s for p in run.parts}
    assert worst == {
        "settle": 50,
        "warm-up": 8,
        "steady state": 20,
        "choosing the victim": 20,
        "the kill to show": 100,
        "recovery": 100,
        "cool-down": 5,
        "stopping the load": 10 + 30,  # load.stop_timeout_s and the stop's own margin
        "judging": 3 + 2,
    }
    typical = {p.what: p.typical_s for p in run.parts}
    # the local target starts its engines (4 s), and the replacement starts too;
    # the answers (0.5 s + 100 x 0.1 s) are half done at the stop, on average
    assert typical["settle"] == 5 and typical["recovery"] == 4
    assert typical["stopping the load"] == pytest.approx(5.25)
    assert run.worst_s == 348 and run.typical_s < run.worst_s


def test_a_rollout_takes_what_the_planner_predicts_for_its_own_strategy(tmp_path):
    cfg = literal(tmp_path, "replicas: 4\nengine: {startup_s: 20, itl_s: 0.01}\n")
    one, blue_green = (
        outlook([("r", "rollout", {"max_surge": s, "max_unavailable": "0"})], cfg, "local")
        .scenarios[0]
        .parts
        for s in ("1", "100%")
    )
    took = {
        s: next(p.typical_s for p in parts if p.what == "the rollout")
        for s, parts in (("1", one), ("100%", blue_green))
    }
    # one new pod at a time: four starts in a row; blue-green: all four at once
    assert took["1"] >= 4 * 20 and took["100%"] < 2 * 20


def test_the_default_session_fits_the_suites_half_hour_and_the_gpu_nightly_plans_its_nights(
    tmp_path,
):
    default = outlook(EVERY_RUN, load_config(None, []), "local")
    assert default.typical_s < 10 * 60 and default.typical_s < default.worst_s < 60 * 60
    assert default.over(60 * 60) == []

    gpu = outlook(EVERY_RUN, load_config(ROOT / "profiles/gpu.yaml", []), "kube")
    # replicas of minutes to start, bounds of half an hour: the estimate fits the chart's
    # six hours, the worst case is several times it (so the night plans: test_chart.py)
    assert gpu.typical_s < NIGHTLY_DEADLINE_S and gpu.worst_s > 3 * NIGHTLY_DEADLINE_S
    assert max(s.worst_s for s in gpu.scenarios) * 2 < NIGHTLY_DEADLINE_S  # two a night
    (advice,) = gpu.over(NIGHTLY_DEADLINE_S)  # dropping scenarios cannot fix it: no drop
    assert advice.startswith("shorten scenario.recovery_s (22 waits, 11h00m")


def test_a_deadline_a_few_scenarios_overrun_names_them_and_the_bounds(tmp_path):
    cfg = load_config(None, [])
    est = outlook(EVERY_RUN, cfg, "local")
    biggest = sorted(est.scenarios, key=lambda s: -s.worst_s)
    deadline = est.worst_s - biggest[0].worst_s / 2  # dropping the largest one would do
    drop, shorten = est.over(deadline)
    assert drop.startswith(f"drop {biggest[0].name} (worst ")
    assert biggest[1].name not in drop
    # the default's 60 s steady-state bound, in 15 waits, weighs most
    assert shorten.startswith("or shorten scenario.steady_state_s (15 waits, 15m00s")
    assert "would fit alone" in shorten  # a little less of it is enough
