"""How the pytest plugin takes its options: mistakes are one line, never a run of the
wrong tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[1]


def pytest_run(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_kubeconfig_with_a_space_is_one_line_not_the_projects_own_tests(tmp_path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    r = pytest_run("-k", "drain", "--target", "kube", "--kubeconfig", str(kubeconfig))
    assert r.returncode == 4, r.stdout[-1000:]
    assert "write --kubeconfig=PATH" in r.stderr and "Traceback" not in r.stderr
    assert "passed" not in r.stdout and "tests/" not in r.stdout  # nothing collected or run


def test_kubeconfig_with_equals_reaches_the_target(tmp_path):
    r = pytest_run("-k", "drain and pod", "--target", "kube", f"--kubeconfig={tmp_path}/none")
    assert r.returncode == 1
    assert f"kubeconfig {tmp_path}/none does not exist; pass --kubeconfig=PATH" in r.stdout
    assert "Traceback" not in r.stdout
