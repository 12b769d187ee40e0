"""The SLOs a real engine is judged by on the machine at hand, from literal figures."""

from __future__ import annotations

import pytest

from harness.calibration import EngineFigures, calibrate, figures_from
from harness.streams import StreamRecord

pytestmark = pytest.mark.unit

QUIET = EngineFigures(0.12, 0.014, 0.6, 0.05, 4)  # the slow model, 2 quiet cores
BUSY = EngineFigures(0.4, 0.04, 2.9, 0.15, 4)  # the same with two busy loops beside it


def test_a_quiet_machine_is_judged_by_the_engines_default():
    cal = calibrate(QUIET, 5.0, None, frozenset())
    assert cal.ttft_s == 5.0 and cal.itl_s is None and not cal.warnings
    assert "0.12 s unloaded" in cal.lines[0] and "0.60 s at worst in a batch of 4" in cal.lines[0]


def test_a_busy_machine_is_judged_by_three_times_its_full_batch():
    cal = calibrate(BUSY, 5.0, None, frozenset())
    assert cal.ttft_s == 9.0  # 3 x 2.9 s, rounded up to the half second
    assert "judging TTFT by 9 s" in cal.lines[1] and "--set slo.ttft_s" in cal.lines[1]


def test_a_set_slo_is_kept_and_one_this_machine_cannot_meet_is_said():
    cal = calibrate(BUSY, 8.0, None, frozenset({"slo.ttft_s"}))
    assert cal.ttft_s == 8.0 and not cal.warnings
    cal = calibrate(BUSY, 0.3, None, frozenset({"slo.ttft_s"}))
    assert cal.ttft_s == 0.3
    assert "not above this machine's unloaded TTFT (0.40 s)" in cal.warnings[0]
    cal = calibrate(BUSY, 2.0, 0.1, frozenset({"slo.ttft_s", "slo.itl_s"}))
    assert "TTFT in a full batch (2.90 s)" in cal.warnings[0]
    assert "slo.itl_s 0.1 s is not above" in cal.warnings[1]


def rec(ttft, itl, outcome="complete", prompt_tokens=None):
    usage = None if prompt_tokens is None else {"prompt_tokens": prompt_tokens}
    return StreamRecord("r", outcome, 0.0, 1.0, ttft_s=ttft, itl_p50_s=itl, usage=usage)


def test_figures_are_the_median_unloaded_and_the_worst_of_the_batch():
    f = figures_from(
        [rec(0.2, 0.01), rec(0.1, 0.02), rec(0.3, 0.03)], [rec(0.5, 0.05), rec(0.9, 0.07)]
    )
    assert f == EngineFigures(0.2, 0.02, 0.9, 0.06, 2)


def test_an_engine_that_broke_a_measuring_request_gives_no_figures():
    assert figures_from([rec(0.2, 0.01)], [rec(None, None, "hung")]) is None
    assert figures_from([], [rec(0.5, 0.05)]) is None


def test_the_figures_say_the_prompt_length_the_engine_counted():
    """The first token on a CPU engine is mostly the prompt's prefill: the figures say
    how long the measuring prompts were (the load's longest), as the engine counted."""
    f = figures_from([rec(0.2, 0.01, prompt_tokens=149)], [rec(0.5, 0.05, prompt_tokens=150)])
    assert f.prompt_tokens == 150
    assert "(150-token prompts)" in calibrate(f, 5.0, None, frozenset()).lines[0]
    assert figures_from([rec(0.2, 0.01)], [rec(0.5, 0.05)]).prompt_tokens is None
