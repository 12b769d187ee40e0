"""The one bounded wait: what it returns, how it times out, and how it stops early."""

from __future__ import annotations

import itertools

import pytest

from harness.cluster.target import EvictionRefused, evict_retrying
from harness.waits import WaitTimeout, hold, wait_until

pytestmark = pytest.mark.unit


def test_returns_the_first_truthy_value():
    tries = itertools.count(1)
    assert wait_until(lambda: (n := next(tries)) >= 3 and n, 5, "three tries", 0.001) == 3


def test_times_out_as_the_callers_error_with_what_and_detail():
    class Mine(Exception):
        pass

    with pytest.raises(Mine, match=r"timed out after 0.05 s waiting for the moon \(still new\)"):
        wait_until(lambda: False, 0.05, "the moon", 0.01, error=Mine, detail=lambda: "still new")
    with pytest.raises(WaitTimeout):
        wait_until(lambda: 0, 0, "nothing")


def test_tries_once_even_with_no_time_and_returns_falsy_when_told_not_to_raise():
    calls = []
    assert wait_until(lambda: calls.append(1), 0, "x", error=None) is None
    assert calls == [1]


def test_alive_ends_the_wait_early():
    def dead():
        raise RuntimeError("the process exited")

    with pytest.raises(RuntimeError, match="exited"):
        wait_until(lambda: False, 60, "never", alive=dead)


def test_hold_checks_alive_until_the_time_is_up():
    seen = []
    hold(0.05, alive=lambda: seen.append(1), interval_s=0.01)
    assert len(seen) >= 3
    with pytest.raises(RuntimeError):
        hold(60, alive=lambda: (_ for _ in ()).throw(RuntimeError("died")))


def test_evictions_are_retried_while_refused_and_the_last_refusal_is_raised():
    answers = iter([EvictionRefused("pdb 1"), EvictionRefused("pdb 2"), None])

    def attempt():
        a = next(answers)
        if a is not None:
            raise a

    evict_retrying(attempt, 5, interval_s=0.001)  # the third try is let through
    refusals = iter(EvictionRefused(f"pdb {i}") for i in itertools.count())

    def always_refused():
        raise next(refusals)

    with pytest.raises(EvictionRefused, match=r"pdb [1-9]"):
        evict_retrying(always_refused, 0.02, interval_s=0.005)
    with pytest.raises(EvictionRefused, match="pdb"):
        evict_retrying(always_refused, 0, interval_s=1)  # no deadline: one try


def test_a_wait_that_follows_progress_outlives_its_stall_bound_while_progress_comes():
    """An engine's start is waited for while its log grows: 0.05 s without progress is the
    bound, but a start that keeps logging is waited for past it (up to the ceiling)."""
    ticks = itertools.count()
    done_at = 40  # about 0.2 s of polls at 5 ms: four times the stall bound
    n = 0

    def cond():
        nonlocal n
        n = next(ticks)
        return n >= done_at

    assert wait_until(cond, 0.05, "a start", 0.005, progress=lambda: n, ceiling_s=5)


def test_a_wait_that_follows_progress_fails_when_progress_stops_or_at_the_ceiling():
    with pytest.raises(WaitTimeout, match=r"the last 0.05 s without progress, waiting for a start"):
        wait_until(lambda: False, 0.05, "a start", 0.005, progress=lambda: 1, ceiling_s=5)
    ticks = itertools.count()
    with pytest.raises(WaitTimeout, match=r"\(the ceiling\) waiting for a start"):
        wait_until(
            lambda: False, 0.05, "a start", 0.005, progress=lambda: next(ticks), ceiling_s=0.1
        )
