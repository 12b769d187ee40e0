"""The planner reproduces facts.md's rollout table exactly."""

import subprocess
import sys

import pytest

from harness.plan import hpa_desired, plan_rollout, plan_scale_up


@pytest.mark.unit
@pytest.mark.parametrize(
    "surge, unavailable, duration, fewest", [(1, 0, 540, 6), (2, 1, 190, 5), (6, 0, 115, 6)]
)
def test_facts_table(surge, unavailable, duration, fewest):
    plan = plan_rollout(6, 60, 30, surge, unavailable, gpu_bound=True)
    assert (plan.duration_s, plan.min_available) == (duration, fewest)


@pytest.mark.unit
@pytest.mark.parametrize("ready_s, duration", [(10, 95), (60, 190), (180, 430)])
def test_startup_time_multiplies_into_rollout_time(ready_s, duration):
    assert plan_rollout(6, ready_s, 30, 2, 1, gpu_bound=True).duration_s == duration


@pytest.mark.unit
def test_kubernetes_rule_is_faster_with_spare_gpus():
    k8s = plan_rollout(6, 60, 30, 1, 0, gpu_bound=False)
    assert k8s.duration_s < 540 and k8s.min_available == 6
    assert plan_rollout(6, 60, 30, 6, 0).extra_gpus == 6


@pytest.mark.unit
def test_hpa_formula_and_tolerance():
    assert hpa_desired(2, 10, 4) == 5
    assert hpa_desired(4, 4.3, 4) == 4  # within 10 %: no change
    assert plan_scale_up(1, 9, 3, ready_s=60).desired == 3
    assert plan_scale_up(1, 9, 3, ready_s=60, sync_period_s=15).lag_s == 75


@pytest.mark.process
def test_bad_input():
    with pytest.raises(ValueError):
        plan_rollout(6, 60, 30, 0, 0)
    with pytest.raises(ValueError):
        plan_rollout(6, -1, 30, 1, 0)
    r = subprocess.run(
        [sys.executable, "-m", "harness.cli", "plan", "--ready-s", "-5"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and r.stdout == "" and "negative" in r.stderr


@pytest.mark.process
def test_plan_command_table():
    r = subprocess.run(
        [sys.executable, "-m", "harness.cli", "plan", "--gpu-bound"], capture_output=True, text=True
    )
    assert r.returncode == 0
    assert "540s" in r.stdout and "190s" in r.stdout and "115s" in r.stdout
