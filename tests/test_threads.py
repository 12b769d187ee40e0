"""No thread of rollcheck's outlives the session (harness/threads.py): those still
ending are waited for, and one that would not end is named, never left silently to meet
the interpreter's finalization."""

from __future__ import annotations

import threading
import time

import pytest

from harness.threads import outliving

pytestmark = pytest.mark.unit


def test_threads_still_ending_are_joined_and_a_stuck_one_is_named():
    release = threading.Event()
    ending = threading.Thread(target=time.sleep, args=(0.3,), name="health", daemon=True)
    stuck = threading.Thread(target=release.wait, name="watch-pods", daemon=True)
    foreign = threading.Thread(target=release.wait, name="someone-elses", daemon=True)
    for t in (ending, stuck, foreign):
        t.start()
    try:
        t0 = time.monotonic()
        assert outliving(1.0) == ["watch-pods"]  # not the foreign one: not ours to judge
        assert not ending.is_alive() and time.monotonic() - t0 < 3
    finally:
        release.set()
    assert outliving(2.0) == []
