"""kube-local's image cache stays bounded: every clean clone names a new image tar (its
files' times differ) and a runner image is 700 MB, so all but the newest few go."""

from __future__ import annotations

import os
import time

import pytest

from harness.cluster.kubelocal.image import KEEP_TARS, _prune

pytestmark = pytest.mark.unit


def test_old_tars_of_a_kind_are_pruned_to_the_newest_few(tmp_path):
    now = time.time()
    made = []
    for i in range(6):
        tar = tmp_path / f"runner-{i}.tar"
        tar.write_bytes(b"x")
        os.utime(tar, (now - 60 * i, now - 60 * i))  # runner-0 the newest
        made.append(tar)
    other_kind = tmp_path / "sim-old.tar"
    other_kind.write_bytes(b"x")
    _prune(tmp_path, "runner-", made[3])  # the one just made (or reused) is kept
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(
        ["runner-3.tar", "sim-old.tar"] + [f"runner-{i}.tar" for i in range(KEEP_TARS)]
    )
