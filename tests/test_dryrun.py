"""The dry run replaces only what acts: every Target method is a read (passed through to
the real target), a wait (answered by the dry run), or an action the dry run plans; a
method of none of these refuses in a dry run rather than act."""

from __future__ import annotations

import pytest

from harness.cluster.target import READS, WAITS, CannotRun, Target, acting_methods
from harness.dryrun import DryRunTarget, _unplanned

pytestmark = pytest.mark.unit


def test_every_action_of_a_target_has_a_plan_in_the_dry_run():
    unplanned = [n for n in acting_methods() if getattr(DryRunTarget, n).__dict__.get("unplanned")]
    assert not unplanned, f"actions a dry run would refuse: {unplanned}"
    assert not (READS & WAITS)
    assert all(hasattr(Target, n) for n in READS | WAITS), "a read or wait Target lacks"


def test_a_read_goes_to_the_real_target_and_an_action_without_a_plan_refuses():
    class Inner:
        def mirror_blocker(self):
            return None  # this target mirrors (the base class says it cannot)

        def pd_blocker(self):
            return "not here"

    dry = DryRunTarget.__new__(DryRunTarget)
    dry.inner = Inner()
    assert dry.mirror_blocker() is None and dry.pd_blocker() == "not here"
    with pytest.raises(CannotRun, match="no plan for set_weight yet"):
        _unplanned("set_weight")(dry, 10)
