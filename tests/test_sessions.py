"""The nightly's folder: one dated session a night, JUnit inside it, old nights pruned."""

from __future__ import annotations

import json

import pytest

from harness.pytest_plugin import prune_sessions

pytestmark = pytest.mark.unit


def session(root, name: str) -> None:
    run = root / name / "test_drain_pod"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"verdict": "pass"}))


def test_pruning_keeps_the_newest_sessions_and_nothing_else_is_touched(tmp_path):
    for day in ("20261128", "20261129", "20261130", "20261201"):
        session(tmp_path, f"{day}-020000-kube")
    (tmp_path / "kube-local-20261101-000000").mkdir()  # not a session: kept
    (tmp_path / "20261101-000000-kube").mkdir()  # a session's name, but no run in it: kept
    (tmp_path / "history.html").write_text("x")
    gone = prune_sessions(tmp_path, keep=2)
    assert gone == ["20261128-020000-kube", "20261129-020000-kube"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "20261101-000000-kube",
        "20261130-020000-kube",
        "20261201-020000-kube",
        "history.html",
        "kube-local-20261101-000000",
    ]
    assert prune_sessions(tmp_path, keep=5) == []


def test_pruning_never_takes_the_current_session_whatever_its_name_sorts_as(tmp_path):
    for day in ("20261128", "20261129", "20261130"):
        session(tmp_path, f"{day}-020000-kube")
    # this night's folder, named by a node whose clock was set back: it sorts first
    session(tmp_path, "20250101-020000-kube")
    gone = prune_sessions(tmp_path, keep=2, current=tmp_path / "20250101-020000-kube")
    assert gone == ["20261128-020000-kube", "20261129-020000-kube"]
    assert (tmp_path / "20250101-020000-kube").is_dir()
    assert prune_sessions(tmp_path, keep=1, current=tmp_path / "20250101-020000-kube") == [
        "20261130-020000-kube"
    ]
