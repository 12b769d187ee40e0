"""Deployments shaped as on the clusters users run, on kube-local: a proxy sidecar listed
before the engine with a port of its own and a Service whose named targetPort differs
from its port; an HPA whose minReplicas is above or below the count a scenario holds; a
Deployment another controller owns; a gateway pod of two containers. Each must trace,
hold and judge as the plain deploy/sim does (docs/kube.md, "Production shapes")."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from harness.cluster.kube import KubeTarget
from harness.cluster.kube.restore import restore_pending
from harness.cluster.target import TargetError
from harness.config.schema import load_config
from tests.kube.conftest import ready_pods, sim_objects, wait_for
from tests.scenario_runs import run_scenarios

KUBE_LOCAL_TTFT = "slo.ttft_s=5"  # as in test_kube_target: the mechanics, not TTFT
# a proxy listed first, listening on a port of its own (Istio's istio-proxy with
# holdApplicationUntilProxyStarts; llm-d's routing sidecar)
PROXY = {
    "name": "proxy",
    "image": "localhost/rollcheck/sim:v1",
    "command": ["python3", "-m", "http.server", "9090"],
    "ports": [{"name": "proxy", "containerPort": 9090}],
}


def deploy(kube_local, namespace, objs, replicas=2):
    kube_local.apply_objects(objs, namespace)
    wait_for(lambda: len(ready_pods(kube_local, namespace)) == replicas, 90, "ready pods")
    return kube_local.ingress("rollcheck-sim", namespace)


def sets(kube_local, namespace, ingress, *more) -> list[str]:
    return [
        f"kube.namespace={namespace}",
        "replicas=2",
        f"kube.gateway_url={ingress.url}",
        f"kube.gateway_log_files=[{ingress.nginx.access_log}, {ingress.nginx.error_log}]",
        "scenario.recovery_s=60",
        KUBE_LOCAL_TTFT,
        *more,
    ]


def options(kube_local) -> tuple[str, ...]:
    return ("--target", "kube", f"--kubeconfig={kube_local.kubeconfig}")


def events_of(summary: dict) -> list[dict]:
    path = Path(summary["report"]).parent / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_drain_of_pods_with_a_proxy_listed_first_traces_and_passes(
    kube_local, namespace, tmp_path
):
    """The engine is the second container and the Service targets its named port from
    port 80: the engine's gauges are read on its own port (the drain sees a steady state)
    and the gateway's upstream addresses name the pods."""
    objs = sim_objects(replicas=2, pdb_min=1)
    dep, svc, _ = objs
    dep["spec"]["template"]["spec"]["containers"].insert(0, PROXY)
    svc["spec"]["ports"] = [{"name": "http", "port": 80, "targetPort": "http"}]
    ingress = deploy(kube_local, namespace, objs)
    r, summaries = run_scenarios(
        tmp_path / "reports",
        "drain and pod",
        *sets(kube_local, namespace, ingress),
        options=options(kube_local),
    )
    (summary,) = summaries
    assert summary["verdict"] == "pass", r.stdout[-3000:]
    assert r.returncode == 0
    att = summary["attribution"]
    assert att["traced"] >= 0.9 * att["total"] > 0, att
    chosen = [e for e in events_of(summary) if e["kind"] == "engine_container"]
    assert chosen and chosen[0]["detail"]["container"] == "engine", chosen
    assert chosen[0]["detail"]["port"] == 8000
    assert chosen[0]["detail"]["why"] == "Service rollcheck-sim targets its port http"


def hpa(min_replicas: int, max_replicas: int = 4) -> dict:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "rollcheck-sim"},
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": "rollcheck-sim",
            },
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 80},
                    },
                }
            ],
        },
    }


def hpa_as_set(kube_local, namespace) -> tuple[dict, list]:
    """The HPA's spec and its field managers, less the controller's status writes (it
    writes status at every sync, whoever else touched the object)."""
    obj = client.AutoscalingV2Api(kube_local.api).read_namespaced_horizontal_pod_autoscaler(
        "rollcheck-sim", namespace
    )
    d = kube_local.api.sanitize_for_serialization(obj)
    managers = sorted(
        (m["manager"], m["operation"], json.dumps(m.get("fieldsV1"), sort_keys=True))
        for m in d["metadata"].get("managedFields") or []
        if m.get("subresource") != "status"
    )
    return d["spec"], managers


def test_a_drain_holds_an_hpa_that_wants_more_replicas_and_puts_it_back_exactly(
    kube_local, namespace, tmp_path
):
    """An HPA with minReplicas 3 on a Deployment the drain holds at 2 raised the count
    back at its next sync, and the drain was INCONCLUSIVE (scaler_did_not_fight). Held by
    selectPolicy Disabled and minReplicas 2, it does not fight, the drain PASSes, and the
    HPA is put back as it was: every spec field and every field manager."""
    ingress = deploy(kube_local, namespace, sim_objects(replicas=2, pdb_min=1))
    client.AutoscalingV2Api(kube_local.api).create_namespaced_horizontal_pod_autoscaler(
        namespace, hpa(3)
    )
    wait_for(lambda: len(ready_pods(kube_local, namespace)) == 3, 60, "the HPA's third pod")
    before = hpa_as_set(kube_local, namespace)
    r, summaries = run_scenarios(
        tmp_path / "reports",
        "drain and pod",
        *sets(kube_local, namespace, ingress),
        options=options(kube_local),
    )
    (summary,) = summaries
    checks = {c["name"]: c for c in summary["checks"]}
    assert checks["scaler_did_not_fight"]["status"] == "pass", checks["scaler_did_not_fight"]
    assert summary["verdict"] == "pass", r.stdout[-3000:]
    held = [e["detail"] for e in events_of(summary) if e["kind"] == "scaler_held"]
    assert held and held[0]["minReplicas"] == 2 and held[0]["maxReplicas"] == 4, held
    after = hpa_as_set(kube_local, namespace)
    assert after == before
    assert not [m for m in after[1] if m[0] == "rollcheck"], after[1]


def test_an_hpa_below_the_held_count_is_held_and_kube_restore_puts_it_back(
    kube_local, namespace, tmp_path
):
    """minReplicas 1 under a count of 2: only the policies change (min and max already
    hold the count). A run interrupted while it holds the HPA leaves its record on the
    Deployment, and `rollcheck kube-restore` puts the HPA back exactly."""
    deploy(kube_local, namespace, sim_objects(replicas=2, pdb_min=1))
    api = client.AutoscalingV2Api(kube_local.api)
    api.create_namespaced_horizontal_pod_autoscaler(namespace, hpa(1))
    before = hpa_as_set(kube_local, namespace)
    base = [f"kube.kubeconfig={kube_local.kubeconfig}", f"kube.namespace={namespace}"]
    cfg = load_config(None, [*base, "replicas=2"])
    t = KubeTarget(cfg, tmp_path / "run")
    t.start()
    t.hold_count(2)
    spec = api.read_namespaced_horizontal_pod_autoscaler("rollcheck-sim", namespace).spec
    assert (spec.min_replicas, spec.max_replicas) == (1, 4)
    assert spec.behavior.scale_up.select_policy == "Disabled"
    assert spec.behavior.scale_down.select_policy == "Disabled"
    t.watches.stop()  # interrupted: no close(), no restore
    t.watches.stop_logs()
    restored = restore_pending(cfg)
    assert "HorizontalPodAutoscaler rollcheck-sim as it was" in restored, restored
    after = hpa_as_set(kube_local, namespace)
    assert after == before
    assert not [m for m in after[1] if m[0] == "rollcheck"], after[1]


def test_an_owned_deployment_is_refused_in_one_line_and_allowed_with_a_warning(
    kube_local, namespace, tmp_path, capsys
):
    """A Deployment with a controller owner (here a ConfigMap standing for an operator's
    object) is refused before anything changes; kube.allow_owned=true acts on it."""
    deploy(kube_local, namespace, sim_objects(replicas=2, pdb_min=1))
    core, apps = client.CoreV1Api(kube_local.api), client.AppsV1Api(kube_local.api)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "operator"}})
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "operator",
        "uid": owner.metadata.uid,
        "controller": True,
    }
    apps.patch_namespaced_deployment(
        "rollcheck-sim", namespace, {"metadata": {"ownerReferences": [ref]}}
    )
    rv = apps.read_namespaced_deployment("rollcheck-sim", namespace).metadata.resource_version
    base = [f"kube.kubeconfig={kube_local.kubeconfig}", f"kube.namespace={namespace}"]
    with pytest.raises(TargetError) as exc:
        KubeTarget(load_config(None, base), tmp_path / "refused").start()
    said = str(exc.value)
    assert said.startswith(
        f"deployment {namespace}/rollcheck-sim is managed by ConfigMap/operator (v1): it is "
        "the Deployment's controller (ownerReferences)"
    ), said
    assert "kube.allow_owned=true" in said and "\n" not in said
    assert (
        apps.read_namespaced_deployment("rollcheck-sim", namespace).metadata.resource_version == rv
    )
    t = KubeTarget(load_config(None, [*base, "kube.allow_owned=true"]), tmp_path / "allowed")
    t.start()
    t.close()
    assert "WARNING: deployment" in capsys.readouterr().out
    assert any(e.kind == "owned" for e in t.events())


def test_a_gateway_pod_of_two_containers_is_read_from_the_one_logging_access_lines(
    kube_local, namespace, tmp_path
):
    """Envoy Gateway's pods run `envoy` beside `shutdown-manager`: reading such a pod's log
    without naming a container is an HTTP 400. The container whose recent log holds an
    access line is followed, here listed second."""
    objs = sim_objects(replicas=2, pdb_min=1)
    kube_local.apply_objects(objs, namespace)
    wait_for(lambda: len(ready_pods(kube_local, namespace)) == 2, 60, "ready pods")
    ingress = kube_local.ingress("rollcheck-sim", namespace, access_format="upstreaminfo")
    pod = kube_local.ingress_controller_pod(ingress, namespace, shutdown_manager=True)
    core = client.CoreV1Api(kube_local.api)
    wait_for(
        lambda: core.read_namespaced_pod(pod, namespace).status.phase == "Running", 60, "gw pod"
    )
    body = {"model": "rollcheck-sim", "messages": [{"role": "user", "content": "hi"}]}
    url = ingress.url + "/v1/chat/completions"
    httpx.post(url, json=body, headers={"X-Request-Id": "before-1"}, timeout=30)
    wait_for(
        lambda: "before-1" in core.read_namespaced_pod_log(pod, namespace, container="controller"),
        30,
        "the line",
    )
    with pytest.raises(client.ApiException) as unnamed:  # what reading it unnamed gets
        core.read_namespaced_pod_log(pod, namespace)
    assert unnamed.value.status == 400
    assert "a container name must be specified" in unnamed.value.body, unnamed.value.body
    cfg = load_config(
        None,
        [
            f"kube.kubeconfig={kube_local.kubeconfig}",
            f"kube.namespace={namespace}",
            f"kube.gateway_url={ingress.url}",
            f"kube.gateway_pods_namespace={namespace}",
            "kube.gateway_pods_selector=app.kubernetes.io/name=ingress-nginx",
        ],
    )
    t = KubeTarget(cfg, tmp_path / "run")
    t.start()
    try:
        followed = [e for e in t.events() if e.kind == "gateway_log_followed"]
        assert [e.detail["container"] for e in followed] == ["controller"], followed
        httpx.post(url, json=body, headers={"X-Request-Id": "during-1"}, timeout=30)
        access, _ = t.gateway_logs()
        wait_for(lambda: "during-1" in Path(access).read_text(), 30, "the followed line")
    finally:
        t.close()


@pytest.mark.parametrize("decision", ["promote", "rollback"])
def test_a_canary_holds_at_one_candidate_pod_until_judged(
    kube_local, namespace, tmp_path, decision
):
    """The canary's rollout went on to every pod within 2 s of the act, before any answer
    was compared. Now the Deployment holds at one candidate pod (paused, minReadySeconds
    just under its progress deadline) until promoted (the rollout goes on) or rolled back
    (the baseline's template, resumed, nothing else touched); the restore leaves it
    unpaused."""
    deploy(kube_local, namespace, sim_objects(replicas=3, pdb_min=1), replicas=3)
    apps = client.AppsV1Api(kube_local.api)
    before = apps.read_namespaced_deployment("rollcheck-sim", namespace)
    template = kube_local.api.sanitize_for_serialization(before.spec.template)
    cfg = load_config(
        None,
        [
            f"kube.kubeconfig={kube_local.kubeconfig}",
            f"kube.namespace={namespace}",
            "replicas=3",
            "kube.image=localhost/rollcheck/sim:{version}",
        ],
    )
    t = KubeTarget(cfg, tmp_path / "run")
    t.start()
    try:
        t.start_canary("v2")
        t.wait_for(lambda: [p for p in t.ready_pods() if p.version == "v2"], 60, "the candidate")
        time.sleep(5)  # an unheld rollout replaces a baseline pod within a second or two
        live = sorted(p.version for p in t.pods() if not p.terminating)
        assert live == ["v1", "v1", "v1", "v2"], live
        dep = apps.read_namespaced_deployment("rollcheck-sim", namespace)
        # held: paused, and the candidate unavailable for as long as the API allows (a
        # minReadySeconds not below progressDeadlineSeconds, 600 by default, is an HTTP 422)
        assert dep.spec.paused is True and dep.spec.min_ready_seconds == 599
        if decision == "promote":
            t.promote_canary()
            want = "v2"
        else:
            t.rollback_canary()
            want = "v1"
        t.wait_for(
            lambda: sorted(p.version for p in t.ready_pods()) == [want] * 3 and len(t.pods()) == 3,
            90,
            f"every pod {want}",
        )
        dep = apps.read_namespaced_deployment("rollcheck-sim", namespace)
        assert not dep.spec.paused and not dep.spec.min_ready_seconds
        if decision == "rollback":  # the baseline's template, exactly
            assert kube_local.api.sanitize_for_serialization(dep.spec.template) == template
    finally:
        t.close()
    dep = apps.read_namespaced_deployment("rollcheck-sim", namespace)
    assert not dep.spec.paused and not dep.spec.min_ready_seconds
    assert kube_local.api.sanitize_for_serialization(dep.spec.template) == template


def test_a_degraded_canary_on_kube_is_judged_at_one_pod_and_rolled_back(
    kube_local, namespace, tmp_path
):
    """The canary scenario on kube-local: its report shows one candidate pod serving
    while the answers were compared, and a degraded model is rolled back there."""
    ingress = deploy(kube_local, namespace, sim_objects(replicas=2, pdb_min=1))
    r, summaries = run_scenarios(
        tmp_path / "reports",
        "canary and not weighted",  # (-k canary selects weighted_canary too)
        *sets(kube_local, namespace, ingress),
        "kube.image=localhost/rollcheck/sim:{version}",
        "canary.engine.degraded=true",
        options=options(kube_local),
    )
    (summary,) = summaries
    c = summary["canary"]
    assert c["action"] == "rolled back" and c["status"] == "fail", (c, r.stdout[-3000:])
    assert c["candidate_pods_serving"] == [c["candidate_pod"]], c
    page = (Path(summary["report"]).parent / "report.html").read_text()
    assert "Candidate pods serving while the answers were compared: <b>1</b>" in page
    held = [e for e in events_of(summary) if e["kind"] == "canary_held"]
    assert len(held) == 1, held


def test_without_gateway_logs_the_engines_request_logs_trace_a_drain(
    kube_local, namespace, tmp_path
):
    """No gateway log given: each engine pod's log (its engine container, listed after a
    proxy) is followed, and the pod whose engine logged `Received request
    chatcmpl-<id>` (--enable-log-requests) served that stream. The drain is judged as
    with the gateway's logs."""
    objs = sim_objects(replicas=2, pdb_min=1, args=["--enable-log-requests"])
    objs[0]["spec"]["template"]["spec"]["containers"].insert(0, PROXY)
    ingress = deploy(kube_local, namespace, objs)
    plain = [s for s in sets(kube_local, namespace, ingress) if "gateway_log_files" not in s]
    r, summaries = run_scenarios(
        tmp_path / "reports", "drain and pod", *plain, options=options(kube_local)
    )
    (summary,) = summaries
    assert summary["verdict"] == "pass", r.stdout[-3000:]
    att = summary["attribution"]
    assert att["traced"] >= 0.9 * att["total"] > 0, att
    assert set(att["traced_by"]) == {"engine log"}, att
    assert att["gateway_logs"] is None and att["engine_logs"] >= 2, att
    logs = sorted((Path(summary["report"]).parent / "engines").glob("*.log"))
    assert len(logs) >= 2, logs
