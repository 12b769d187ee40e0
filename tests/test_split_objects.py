"""weighted_canary's candidate Deployment on a cluster, from literal objects: the labels
that put its pods behind the candidate Service alone, and what it keeps of the
Deployment (the kube tests run it on real kubelets)."""

from __future__ import annotations

import pytest

from harness.cluster.kube.common import CANDIDATE_LABEL
from harness.cluster.kube.split import (
    candidate_deployment,
    candidate_labels,
    candidate_name,
    selects,
)

DEP = {
    "metadata": {"name": "vllm"},
    "spec": {
        "replicas": 4,
        "selector": {"matchLabels": {"app": "vllm"}},
        "progressDeadlineSeconds": 900,
        "strategy": {"type": "RollingUpdate"},
        "template": {
            "metadata": {"labels": {"app": "vllm", "team": "serving", "version": "v1"}},
            "spec": {
                "containers": [
                    {"name": "proxy", "image": "envoy:1"},
                    {"name": "engine", "image": "vllm:v1", "args": ["--model=m"]},
                ]
            },
        },
    },
}
CHANGE = {
    "spec": {
        "template": {
            "metadata": {"labels": {"version": "v2"}, "annotations": {"rollcheck.io/rollout": "x"}},
            "spec": {"containers": [{"name": "engine", "image": "vllm:v2"}]},
        }
    }
}


@pytest.mark.unit
@pytest.mark.parametrize(
    "stable, candidate, want",
    [
        # the key the stable Service selects on is dropped from the copy
        (
            {"app": "vllm"},
            {"app-canary": "vllm"},
            {"team": "serving", "version": "v2", "app-canary": "vllm"},
        ),
        # ... or set to the candidate Service's value where it selects on it too
        (
            {"app": "vllm", "track": "stable"},
            {"app": "vllm", "track": "canary"},
            {"app": "vllm", "team": "serving", "version": "v2", "track": "canary"},
        ),
    ],
    ids=["own-key", "same-key-other-value"],
)
def test_the_candidates_pods_are_selected_by_the_candidate_service_alone(stable, candidate, want):
    labels = {"app": "vllm", "team": "serving", "version": "v2"}
    got = candidate_labels(labels, stable, candidate, "vllm")
    assert got == want | {CANDIDATE_LABEL: "vllm"}
    assert selects(candidate, got) and not selects(stable, got)


@pytest.mark.unit
def test_the_candidate_deployment_is_the_template_at_the_new_version():
    stable, candidate = {"app": "vllm"}, {"app": "vllm-canary"}
    body = candidate_deployment(DEP, CHANGE, stable, candidate, "run-7")
    assert body["metadata"]["name"] == "vllm-rollcheck-candidate"
    spec = body["spec"]
    assert spec["replicas"] == 1
    assert spec["selector"] == {"matchLabels": {"app": "vllm-canary", CANDIDATE_LABEL: "vllm"}}
    meta = spec["template"]["metadata"]
    assert meta["labels"] == {
        "app": "vllm-canary",
        "team": "serving",
        "version": "v2",
        CANDIDATE_LABEL: "vllm",
    }
    assert meta["annotations"] == {"rollcheck.io/rollout": "x"}
    proxy, engine = spec["template"]["spec"]["containers"]
    assert proxy == {"name": "proxy", "image": "envoy:1"}  # the sidecar as it was
    assert engine == {"name": "engine", "image": "vllm:v2", "args": ["--model=m"]}
    assert spec["progressDeadlineSeconds"] == 900 and "minReadySeconds" not in spec
    assert DEP["spec"]["template"]["metadata"]["labels"]["version"] == "v1"  # not changed


@pytest.mark.unit
def test_a_selectorless_service_selects_nothing_and_long_names_stay_names():
    assert not selects({}, {"app": "vllm"})
    name = candidate_name("d" * 60)
    assert len(name) <= 63 and not name.endswith("-")
