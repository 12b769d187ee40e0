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


@pytest.mark.parametrize(
    "args, said",
    [
        (
            ["--set", "run.dir=x"],
            "--set run.dir=x: unknown setting 'run'; known here: adapter, autoscaler,",
        ),
        (["--set", "replicas=two"], "--set replicas=two: replicas: expected a whole number"),
        (["--config", "nowhere.yaml"], "nowhere.yaml"),
    ],
)
def test_a_bad_setting_is_one_line_before_anything_runs(args, said):
    r = pytest_run("-k", "drain and pod", *args)
    assert r.returncode == 4, r.stdout[-1000:]
    (line,) = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert line.startswith("ERROR: ") and said in line, r.stderr
    assert "def rollcheck_config" not in r.stdout and "passed" not in r.stdout


def test_kubeconfig_with_equals_reaches_the_target(tmp_path):
    r = pytest_run("-k", "drain and pod", "--target", "kube", f"--kubeconfig={tmp_path}/none")
    assert r.returncode == 1
    assert f"kubeconfig {tmp_path}/none does not exist; pass --kubeconfig=PATH" in r.stdout
    assert "Traceback" not in r.stdout


def test_dry_run_walks_the_scenario_and_touches_nothing(tmp_path):
    """--dry-run wraps the target and the scenario: the actions are printed and planned,
    no pod is evicted, signalled or replaced, and no load is sent."""
    import json

    r = pytest_run(
        "scenarios", "-k", "drain and pod", "--dry-run", "-s", "-rs", "--reports-dir", str(tmp_path)
    )
    assert r.returncode == 0 and "Traceback" not in r.stdout, r.stdout[-2000:]
    assert '[dry-run] would evict {"pod": "rollcheck-sim-v1-' in r.stdout
    (run,) = tmp_path.glob("*/test_drain_pod")
    plan = json.loads((run / "plan.json").read_text())
    assert [p["action"] for p in plan] == ["steady_state", "evict", "recovered"]
    assert plan[1]["pod"].startswith("rollcheck-sim-v1-") and plan[1]["dry_run"]
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    walked = max(e["t"] for e in events if e["kind"] == "action")  # before the teardown
    touched = {"evicted", "terminating", "sigterm", "sigkill", "pod_removed"}
    assert not [e for e in events if e["kind"] in touched and e["t"] <= walked]
    assert not (run / "records.jsonl").exists()  # no load


def test_a_dry_run_asks_the_real_target_what_it_can_do(tmp_path):
    """The dry run's target passes every read through: a shadow and a P/D rollout, which
    the local target runs, are planned, not skipped by the base class's "cannot mirror"
    and "no prefill/decode deployment" (as they were while the dry run forwarded its
    reads one by one and missed these)."""
    import json

    r = pytest_run(
        "scenarios",
        "-k",
        "shadow or pd_rollout and together",
        "--dry-run",
        "-s",
        "-rs",
        "--reports-dir",
        str(tmp_path),
    )
    assert r.returncode == 0 and "Traceback" not in r.stdout, r.stdout[-2000:]
    assert "cannot mirror" not in r.stdout and "prefill/decode deployment" not in r.stdout
    (shadow,) = tmp_path.glob("*/test_shadow/plan.json")
    (pd,) = tmp_path.glob("*/test_pd_rollout_together/plan.json")
    assert "rollout" in [p["action"] for p in json.loads(shadow.read_text())]
    rolled = [p for p in json.loads(pd.read_text()) if p["action"] == "rollout"]
    assert [p["roles"] for p in rolled] == [["prefill", "decode"]]


def test_a_target_that_cannot_run_the_scenario_makes_it_skipped_with_the_reason(tmp_path):
    """CannotRun (raised by a target before it acts, as the Kubernetes one does for a
    scale_to_zero with no scaler) is SKIPPED with its reason, in the terminal and in the
    run folder: not an error, never a pass."""
    import json

    (tmp_path / "test_cannot.py").write_text(
        "import pytest\n"
        "from harness.cluster.target import CannotRun\n\n"
        "@pytest.mark.scale_to_zero\n"
        "def test_cannot(scenario):\n"
        "    raise CannotRun('no scaler of the Deployment was found')\n"
    )
    reports = tmp_path / "reports"
    r = pytest_run(str(tmp_path / "test_cannot.py"), "-rs", "--reports-dir", str(reports))
    assert r.returncode == 0, r.stdout[-2000:]
    assert "1 skipped" in r.stdout and "error" not in r.stdout.lower(), r.stdout[-2000:]
    assert "SKIPPED: no scaler of the Deployment was found" in r.stdout
    (summary,) = reports.glob("*/test_cannot/summary.json")
    said = json.loads(summary.read_text())
    assert (
        said["verdict"] == "skipped" and said["reason"] == "no scaler of the Deployment was found"
    )


def test_reports_dir_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "reports").write_text("")
    r = pytest_run("scenarios", "-k", "drain and pod", "--reports-dir", str(tmp_path / "reports"))
    assert r.returncode == 4, r.stdout[-1000:]
    (line,) = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "is a file, not a folder" in line and "INTERNALERROR" not in r.stdout + r.stderr
