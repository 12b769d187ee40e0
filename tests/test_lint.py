"""Every lint rule: a manifest that trips it and one that passes."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.lint import LintInputError, LintOptions, lint, parse_documents

ROOT = Path(__file__).resolve().parents[1]
GOOD = (ROOT / "deploy/vllm/deployment.yaml").read_text()


def docs() -> list[dict]:
    return [d for d in yaml.safe_load_all(GOOD) if d]


def rules_of(objs: list[dict], **opts) -> set[str]:
    text = yaml.safe_dump_all(objs)
    return {f.rule for f in lint(parse_documents(text, "m.yaml"), LintOptions(**opts))}


def container(objs):
    return objs[0]["spec"]["template"]["spec"]["containers"][0]


def test_the_example_and_llm_d_settings_lint_clean():
    assert rules_of(docs()) == set()


def mutate(fn):
    objs = copy.deepcopy(docs())
    fn(objs)
    return objs


CASES = {
    "RC001": lambda o: container(o).pop("startupProbe"),
    "RC002": lambda o: container(o)["startupProbe"].update(failureThreshold=3),
    "RC003": lambda o: container(o)["livenessProbe"].update(failureThreshold=1, periodSeconds=5),
    "RC004": lambda o: o[0]["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=30),
    "RC005": lambda o: container(o).update(args=["--model=x"]),
    "RC006": lambda o: container(o).pop("lifecycle"),
    "RC007": lambda o: o[2]["spec"].update(maxUnavailable=0),
    "RC008": lambda o: o[3]["spec"]["triggers"][0]["metadata"].update(
        query="avg(DCGM_FI_DEV_GPU_UTIL)"
    ),
    "RC009": lambda o: o[3]["spec"].update(cooldownPeriod=10),
    "RC010": lambda o: (
        o[3]["spec"].update(minReplicaCount=0),
        o[3]["spec"]["triggers"][0]["metadata"].update(
            query="sum(rate(vllm:request_success_total[1m]))"
        ),
    ),
}


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_trips(rule):
    assert rule in rules_of(mutate(CASES[rule]))


def test_rc005_default_vllm_is_flagged_and_rc004_counts_default_grace():
    objs = mutate(
        lambda o: (
            container(o).update(args=["--model=x"]),
            o[0]["spec"]["template"]["spec"].pop("terminationGracePeriodSeconds"),
        )
    )
    assert {"RC005"} <= rules_of(objs)


def test_pdb_min_available_100_percent_blocks_drains():
    def full_pdb(objs):
        del objs[2]["spec"]["maxUnavailable"]
        objs[2]["spec"]["minAvailable"] = "100%"

    assert "RC007" in rules_of(mutate(full_pdb))


def test_hpa_on_gpu_and_no_cooldown():
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "vllm"},
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": "vllm"},
            "metrics": [
                {"type": "External", "external": {"metric": {"name": "DCGM_FI_DEV_GPU_UTIL"}}}
            ],
        },
    }
    assert {"RC008", "RC009"} <= rules_of(docs() + [hpa])
    hpa["spec"]["metrics"][0]["external"]["metric"]["name"] = "vllm:num_requests_waiting"
    hpa["spec"]["behavior"] = {"scaleDown": {"stabilizationWindowSeconds": 300}}
    assert rules_of(docs() + [hpa]) == set()


def test_gpu_quota_for_surge():
    assert "RC011" in rules_of(docs(), gpu_quota=2)  # 2 replicas + 1 surge need 3 GPUs
    assert "RC011" not in rules_of(docs(), gpu_quota=3)


def test_non_inference_deployments_are_ignored():
    objs = mutate(lambda o: container(o).update(image="nginx:1.27", args=[]))
    assert rules_of(objs) == set()


@pytest.mark.parametrize(
    "text, message",
    [
        ("a: [unclosed\n", "document 1 line"),
        (
            "kind: Deployment\nmetadata: {name: x}\nspec: {replicas: 1, template: {spec: {}}}\n",
            "has no containers",
        ),
        (
            "kind: Deployment\nmetadata: {name: x}\nspec: {replica: 1}\n",
            "unknown field spec.replica",
        ),
        (
            "---\nkind: Service\n---\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n"
            "    spec:\n      terminationGracePeriodSeconds: -5\n      containers: [{name: a, image: vllm}]\n",
            "cannot be negative",
        ),
    ],
)
def test_bad_input_names_file_and_document(text, message):
    with pytest.raises(LintInputError, match=message):
        lint(parse_documents(text, "bad.yaml"))


def run_cli(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "lint", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_formats_exit_codes_and_stdin(tmp_path):
    assert run_cli(str(ROOT / "deploy/vllm")).returncode == 0
    bad = yaml.safe_dump_all(mutate(CASES["RC005"]))
    r = run_cli("-", "--format", "json", stdin=bad)
    assert r.returncode == 1 and json.loads(r.stdout)[0]["rule"] == "RC005"
    r = run_cli("-", "--format", "github", stdin=bad)
    assert r.stdout.startswith("::error file=<stdin>") and "RC005" in r.stdout
    warn_only = yaml.safe_dump_all(mutate(CASES["RC006"]))
    assert run_cli("-", stdin=warn_only).returncode == 0
    assert run_cli("-", "--fail-on", "warning", stdin=warn_only).returncode == 1
    (tmp_path / "x.yaml").write_text("a: [b\n")
    r = run_cli(str(tmp_path / "x.yaml"))
    assert r.returncode == 2 and "x.yaml: document 1" in r.stderr and "Traceback" not in r.stderr
