"""The scaler's decisions from literal API objects: who set the replica count, what the
HPA asked for and why, fights with the harness, the ReplicaSet's choice of pod, and the
timeline and check a report shows."""

from __future__ import annotations

import pytest

from harness import checks
from harness.cluster.kube.scaling import ScalerObserver, removal_reason, replicas_manager
from harness.config import ConfigError
from harness.config.schema import load_config
from harness.events import Event
from harness.timeline import scaler_summary, scaler_timeline
from harness.verdict import RunData, Status

pytestmark = pytest.mark.unit


def deployment(replicas: int, *managers: tuple[str, str]) -> dict:
    """A Deployment whose spec.replicas was last written by each (manager, time) given."""
    return {
        "metadata": {
            "name": "vllm",
            "managedFields": [
                {"manager": "kubectl-client-side-apply", "time": "2026-12-01T00:00:00Z",
                 "fieldsV1": {"f:spec": {"f:template": {}}}},
                *[
                    {"manager": m, "time": t, "subresource": "scale",
                     "fieldsV1": {"f:spec": {"f:replicas": {}}}}
                    for m, t in managers
                ],
            ],
        },
        "spec": {"replicas": replicas},
    }  # fmt: skip


# KEDA's generated HPA, as `kubectl get hpa -o json` shows it mid-step
HPA = {
    "metadata": {"name": "keda-hpa-vllm"},
    "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
        "minReplicas": 1,
        "maxReplicas": 8,
        "metrics": [
            {
                "type": "External",
                "external": {
                    "metric": {"name": "s0-prometheus"},
                    "target": {"type": "AverageValue", "averageValue": "3"},
                },
            }
        ],
    },
    "status": {
        "currentReplicas": 1,
        "desiredReplicas": 3,
        "currentMetrics": [
            {
                "type": "External",
                "external": {"metric": {"name": "s0-prometheus"}, "current": {"averageValue": "9"}},
            }
        ],
        "conditions": [
            {"type": "AbleToScale", "status": "True", "reason": "SucceededRescale"},
            {"type": "ScalingLimited", "status": "False", "reason": "DesiredWithinRange"},
        ],
    },
}


def observer():
    seen = []
    obs = ScalerObserver(lambda kind, **detail: seen.append((kind, detail)), "vllm")
    return obs, seen


def test_the_manager_that_last_wrote_the_replica_count_is_named():
    dep = deployment(
        3,
        ("keda-operator", "2026-12-01T10:00:00Z"),
        ("kube-controller-manager", "2026-12-01T10:05:00Z"),
    )
    assert replicas_manager(dep) == "kube-controller-manager"
    assert replicas_manager(deployment(2)) is None


def test_a_scalers_own_decision_and_a_fight_with_the_harness():
    obs, seen = observer()
    obs.on_deployment("ADDED", deployment(2, ("rollcheck", "2026-12-01T10:00:00Z")))
    obs.on_deployment(
        "MODIFIED", deployment(3, ("kube-controller-manager", "2026-12-01T10:01:00Z"))
    )
    assert seen == [
        (
            "replicas_changed",
            {
                "replicas_from": 2,
                "replicas_to": 3,
                "by": "kube-controller-manager",
                "scaler": "hpa",
            },
        )
    ]
    obs.hold(1)  # the harness scaled to 1 and holds it
    obs.on_deployment("MODIFIED", deployment(1, ("rollcheck", "2026-12-01T10:02:00Z")))
    assert len(seen) == 1  # the harness's own write is not a scaler's
    obs.on_deployment(
        "MODIFIED", deployment(2, ("kube-controller-manager", "2026-12-01T10:02:15Z"))
    )
    kind, detail = seen[-1]
    assert kind == "scaler_fought" and detail["held"] == 1 and detail["replicas_to"] == 2
    obs.release()
    obs.on_deployment("MODIFIED", deployment(0, ("keda-operator", "2026-12-01T10:03:00Z")))
    assert seen[-1] == (
        "replicas_changed",
        {"replicas_from": 2, "replicas_to": 0, "by": "keda-operator", "scaler": "keda"},
    )
    obs.rolling = True
    obs.on_deployment("MODIFIED", deployment(1, ("keda-operator", "2026-12-01T10:04:00Z")))
    assert seen[-1][0] == "scaler_fought" and seen[-1][1]["during"] == "rollout"


def test_an_hpa_status_is_one_event_per_decision_with_its_metric():
    obs, seen = observer()
    obs.on_hpa("ADDED", HPA)
    obs.on_hpa("MODIFIED", HPA)  # the same decision again: nothing new
    other = {
        **HPA,
        "spec": {**HPA["spec"], "scaleTargetRef": {"kind": "Deployment", "name": "other"}},
    }
    obs.on_hpa("ADDED", other)
    assert seen == [
        (
            "scaler_status",
            {
                "hpa": "keda-hpa-vllm",
                "desired": 3,
                "current": 1,
                "metrics": ["s0-prometheus=9 (target 3)"],
                "limited": None,
            },
        )
    ]


def test_the_timeline_and_the_lag_after_a_load_step():
    e = lambda t, kind, pod=None, **d: Event(t=t, kind=kind, pod=pod, detail=d)  # noqa: E731
    events = [
        e(100.0, "action", action="load_step"),
        e(112.0, "scaler_status", hpa="keda-hpa-vllm", desired=3, current=1, metrics=["s0-prometheus=9 (target 3)"], limited=None),
        e(112.5, "replicas_changed", replicas_from=1, replicas_to=3, by="kube-controller-manager", scaler="hpa"),
        e(113.0, "pod_created", pod="vllm-b"),
        e(113.0, "pod_created", pod="vllm-c"),
        e(121.0, "ready", pod="vllm-b"),
        e(124.5, "ready", pod="vllm-c"),
        e(125.0, "k8s_event", object="HorizontalPodAutoscaler", reason="SuccessfulRescale", message="New size: 3; reason: external metric s0-prometheus above target"),
    ]  # fmt: skip
    summary = scaler_summary(events, 100.0)
    assert summary["asked_after_step_s"] == 12.0
    assert summary["new_replicas"] == [
        {"pod": "vllm-b", "ready_after_step_s": 21.0},
        {"pod": "vllm-c", "ready_after_step_s": 24.5},
    ]
    assert [r["what"] for r in summary["timeline"]] == [
        "keda-hpa-vllm wants 3 (has 1): s0-prometheus=9 (target 3)",
        "kube-controller-manager set replicas 1 -> 3",
        "HorizontalPodAutoscaler SuccessfulRescale: New size: 3; reason: external metric "
        "s0-prometheus above target",
    ]
    assert scaler_timeline([e(1.0, "ready", pod="x")], 0.0) == []
    assert scaler_summary([], None) is None


def pod(name, ready_since=None, cost=None, node="n0", created="2026-12-01T10:00:00Z"):
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": created,
            "annotations": {} if cost is None else {"controller.kubernetes.io/pod-deletion-cost": str(cost)},
        },
        "spec": {"nodeName": node},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready_since else "False",
                                   "lastTransitionTime": ready_since}]},
    }  # fmt: skip


def test_why_the_replicaset_removed_that_pod():
    a = pod("a", "2026-12-01T10:00:10Z", node="n0")
    b = pod("b", "2026-12-01T10:00:20Z", node="n1")
    assert "pod-deletion-cost -1000 was the lowest" in removal_reason(
        "a", [pod("a", "2026-12-01T10:00:10Z", cost=-1000, node="n0"), b]
    )
    assert "only one of 2 not ready" in removal_reason("a", [pod("a", None), b])
    assert "ready the shortest time" in removal_reason("b", [a, b])
    twin = pod("t", "2026-12-01T10:00:10Z", node="n1")
    assert "a tie" in removal_reason("a", [a, twin])
    assert "ran 2 of the 3 replicas" in removal_reason(
        "a", [a, pod("c", "2026-12-01T10:00:30Z", node="n0"), b]
    )


def run(events) -> RunData:
    return RunData(
        records=[], events=events, access=[], errors=[], sent=0, replicas=2,
        max_unavailable=0, stall_timeout_s=10, ttft_slo_s=1, t_start=100.0,
    )  # fmt: skip


def test_a_fight_makes_the_run_inconclusive_and_names_the_scaler():
    fought = Event(
        t=105.0,
        kind="scaler_fought",
        pod=None,
        detail={"replicas_from": 1, "replicas_to": 2, "by": "kube-controller-manager", "held": 1},
    )
    scalers = Event(
        t=100.0,
        kind="workload_scalers",
        pod=None,
        detail={"names": ["HorizontalPodAutoscaler/vllm"]},
    )
    data = run([scalers, fought])
    result = checks.scaler_did_not_fight(data)
    assert result.status == Status.INCONCLUSIVE
    assert "kube-controller-manager set replicas 1 -> 2 at +5.0 s (held at 1)" in result.reason
    assert "HorizontalPodAutoscaler/vllm" in result.reason
    calm = run([scalers])
    assert checks.scaler_did_not_fight(calm).status == Status.PASS


def test_the_old_scale_to_zero_setting_names_its_successor():
    with pytest.raises(ConfigError, match=r"--set kube.scale_to_zero=force: .*kube.scaler=harness"):
        load_config(None, ["kube.scale_to_zero=force"])
    assert load_config(None, []).kube.scaler == "cluster"
    with pytest.raises(ConfigError, match="kube.scaler must be cluster or harness"):
        load_config(None, ["kube.scaler=keda"])
