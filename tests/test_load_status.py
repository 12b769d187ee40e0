"""status.json, the load's live account: one writer and one reader (harness.load_status)."""

from __future__ import annotations

import pytest

from harness.load_status import FILE, LoadStatus

pytestmark = pytest.mark.unit


def test_what_the_master_writes_is_what_the_harness_reads(tmp_path):
    status = LoadStatus(
        state="done",
        sent=7,
        records=7,
        settled_at=12.5,
        outcomes={"complete": 6, "truncated": 1, "not-an-outcome": 9},
        workers={"w1": {"loop_lag": {"p99_s": 0.004}}, "w2": {"loop_lag": {"p99_s": None}}},
    )
    status.write(tmp_path)
    back = LoadStatus.read(tmp_path)
    assert back == status
    assert back.outcome_total == 7  # a key no outcome is left out of the accounting
    assert back.loop_lags_p99_s() == [0.004]


def test_no_file_or_a_torn_one_reads_as_none_and_new_keys_are_ignored(tmp_path):
    assert LoadStatus.read(tmp_path) is None
    (tmp_path / FILE).write_text('{"sent": 3, "in_fl')
    assert LoadStatus.read(tmp_path) is None
    (tmp_path / FILE).write_text("[1, 2]")
    assert LoadStatus.read(tmp_path) is None
    (tmp_path / FILE).write_text('{"sent": 3, "from_a_newer_master": true}')
    assert LoadStatus.read(tmp_path) == LoadStatus(sent=3)
