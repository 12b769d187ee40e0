"""preemption's parts that need no cluster: the preemptor asked for, the node's free
accelerators, and the checks judged from literal events (the real scheduler's preemption is
in tests/kube/test_kube_target.py)."""

from __future__ import annotations

import pytest

from harness import checks as C
from harness.cluster.kube.preemption import (
    MAX_PRIORITY,
    accelerators,
    free_on_node,
    preemptor_objects,
)
from harness.cluster.target import CannotRun
from tests.test_verdict import T, data, ev, rec, status

pytestmark = pytest.mark.unit


def victim(priority=None, limits=None, tolerations=None) -> dict:
    engine = {"name": "vllm", "resources": {"limits": limits or {"nvidia.com/gpu": "1"}}}
    spec = {"nodeName": "n1", "containers": [{"name": "proxy"}, engine]}
    if priority is not None:
        spec["priority"] = priority
    if tolerations:
        spec["tolerations"] = tolerations
    return {"metadata": {"name": "vllm-abc"}, "spec": spec}


def test_the_preemptor_asks_for_the_free_accelerators_and_the_victims_on_its_node_only():
    gpu_taint = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    pc, pod = preemptor_objects(
        "20261205-213000-kube", "team-a", victim(100, tolerations=gpu_taint), "vllm",
        "pause:1", {"nvidia.com/gpu": 3},
    )  # fmt: skip
    assert pc["value"] == 101 and pc["preemptionPolicy"] == "PreemptLowerPriority"
    assert pc["globalDefault"] is False
    spec = pod["spec"]
    assert spec["priorityClassName"] == pc["metadata"]["name"] == pod["metadata"]["name"]
    assert pod["metadata"]["namespace"] == "team-a"
    (c,) = spec["containers"]
    assert c["resources"]["requests"] == c["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n1"]
    assert spec["tolerations"] == gpu_taint  # it must be able to run where the victim runs
    # no priority on the victim: 1; one at the users' ceiling stays there
    assert preemptor_objects("r", "ns", victim(), "vllm", "p", {})[0]["value"] == 1
    top = preemptor_objects("r", "ns", victim(MAX_PRIORITY), "vllm", "p", {})[0]
    assert top["value"] == MAX_PRIORITY


def test_an_engine_without_an_accelerator_cannot_be_preempted_for_one():
    with pytest.raises(CannotRun, match="asks for no accelerator"):
        preemptor_objects("r", "ns", victim(limits={"memory": "1Gi", "cpu": "2"}), "vllm", "p", {})


def test_accelerators_are_the_extended_resources_only():
    res = {"limits": {"nvidia.com/gpu": "2", "memory": "8Gi", "hugepages-2Mi": "1Gi"},
           "requests": {"cpu": "4", "amd.com/gpu": 1}}  # fmt: skip
    assert accelerators(res) == {"nvidia.com/gpu": 2, "amd.com/gpu": 1}


def test_free_on_node_counts_terminating_pods_and_not_ended_ones():
    node = {"status": {"allocatable": {"nvidia.com/gpu": "8"}}}

    def pod(n, phase="Running"):
        c = {"resources": {"limits": {"nvidia.com/gpu": str(n)}}}
        return {"status": {"phase": phase}, "spec": {"containers": [c]}}

    pods = [pod(2), pod(3), pod(4, "Succeeded"), pod(1, "Failed")]
    assert free_on_node(node, pods, ["nvidia.com/gpu"]) == {"nvidia.com/gpu": 3}
    assert free_on_node(node, pods + [pod(5)], ["nvidia.com/gpu"]) == {"nvidia.com/gpu": 0}


PREEMPT = ev(T, "action", "p1", action="preempt", pdb="vllm", pdb_allowed=1)
CAPACITY = [
    ev(T - 5, "capacity", ready=2),
    ev(T + 0.5, "capacity", ready=1),
    ev(T + 14.0, "capacity", ready=2),
]


def test_preemption_within_the_pdb_passes_and_says_the_capacity_lost():
    events = [PREEMPT, ev(T + 0.2, "preempted", "p1"), *CAPACITY]
    r = C.preemption_respects_pdb(data([rec("a")], events))
    assert status(r) == "pass", r
    assert r.observed == (
        "1 preempted (p1); PodDisruptionBudget vllm allowed 1; "
        "1 of 2 replicas lost for 13.5 s (from +0.50 s)"
    )


def test_preemption_past_the_pdb_fails_naming_it():
    act = ev(T, "action", "p1", action="preempt", pdb="vllm", pdb_allowed=0)
    r = C.preemption_respects_pdb(data([rec("a")], [act, ev(T + 0.2, "preempted", "p1")]))
    assert status(r) == "fail" and "PodDisruptionBudget vllm allowed 0" in r.observed
    assert "PriorityClass" in r.hint
    # two pods preempted where one was allowed
    two = [PREEMPT, ev(T + 0.2, "preempted", "p1"), ev(T + 0.3, "preempted", "p2")]
    assert status(C.preemption_respects_pdb(data([rec("a")], two))) == "fail"


def test_preemption_without_a_pdb_or_without_evidence():
    act = ev(T, "action", "p1", action="preempt", pdb=None)
    r = C.preemption_respects_pdb(data([rec("a")], [act, ev(T + 0.2, "preempted", "p1")]))
    assert status(r) == "pass" and "no PodDisruptionBudget selects" in r.observed
    none = C.preemption_respects_pdb(data([rec("a")], [PREEMPT]))
    assert status(none) == "inconclusive" and "no pod preempted" in none.reason
    assert status(C.preemption_respects_pdb(data([rec("a")], []))) == "inconclusive"


def test_recovery_after_a_preemption_runs_from_the_preemptor_leaving():
    gone = ev(T + 10, "action", action="preemptor_gone")
    r = C.recovery_time(data([], [PREEMPT, gone], t_recovered=T + 14, recovery_budget_s=5))
    assert status(r) == "pass" and r.observed == "4.0 s", r
    assert "from the preemptor leaving (at +10.00 s)" in r.population
    late = C.recovery_time(data([], [PREEMPT, gone], t_recovered=T + 16, recovery_budget_s=5))
    assert status(late) == "fail"


def test_the_preemptors_name_is_a_dns_name_of_its_namespace_and_run():
    pc, pod = preemptor_objects("test_preemption[x]", "Team_A", victim(), "vllm", "p", {})
    name = pc["metadata"]["name"]
    assert name == pod["metadata"]["name"] == "rollcheck-preemptor-team-a-test-preemption-x"
    long = preemptor_objects("r" * 80, "ns", victim(), "vllm", "p", {})[0]["metadata"]["name"]
    assert len(long) <= 63 and not long.endswith("-")
