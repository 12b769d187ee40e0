"""The helm CLI (scripts/build-helm: built once from its Go module) and the chart
rendered with it, for the chart's tests."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "rollcheck"
# the Kubernetes versions the chart renders for (Chart.yaml kubeVersion: >=1.30); the
# kube tier runs 1.35
KUBE_VERSIONS = ["1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0", "1.35.4"]


@functools.cache
def helm() -> str:
    """The helm binary; a failed build fails the test with its error (never a skip)."""
    r = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-helm")], capture_output=True, text=True
    )
    assert r.returncode == 0, f"scripts/build-helm failed:\n{r.stderr[-3000:]}"
    return r.stdout.strip().splitlines()[-1]


def run_helm(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    r = subprocess.run([helm(), *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, f"helm {' '.join(args)}:\n{r.stderr[-3000:]}"
    return r


def sets(values: dict) -> list[str]:
    out = []
    for key, value in values.items():
        if isinstance(value, (dict, list)):
            import json

            out += ["--set-json", f"{key}={json.dumps(value)}"]
        else:
            out += ["--set", f"{key}={value}"]
    return out


def render(values: dict, namespace: str = "llm-staging", kube_version: str | None = None):
    """The chart's objects for these values (dotted keys), as `helm template` gives them."""
    args = ["template", "rollcheck", str(CHART), "-n", namespace, *sets(values)]
    if kube_version:
        args += ["--kube-version", kube_version]
    return [d for d in yaml.safe_load_all(run_helm(*args).stdout) if d]


def objects_of(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]
