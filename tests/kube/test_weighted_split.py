"""weighted_canary on a cluster, against kube-local: the candidate Deployment runs on real
kubelets behind the candidate Service, the user's HTTPRoute (the Gateway API's CRDs on
the real API server) is served by a real Gateway API implementation (Traefik, its
Gateway provider: harness/cluster/kubelocal/gateway.py), its weights moved and put back,
an interrupted run put back by `rollcheck kube-restore`, and the scenario run through
that gateway as a user runs it."""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid

import httpx
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from harness.cluster.kube import KubeTarget
from harness.cluster.kube.route import GROUP, PLURAL, VERSION
from harness.cluster.kube.split import candidate_name
from harness.cluster.kubelocal.gateway import wait_route_accepted
from harness.config.schema import load_config
from tests.kube.conftest import kube_restore, sim_objects, wait_for
from tests.kube.test_kube_target import KUBE_LOCAL_TTFT, not_passing
from tests.scenario_runs import run_scenarios

pytestmark = pytest.mark.kube

DEPLOYMENT = "rollcheck-sim"
CANDIDATE = candidate_name(DEPLOYMENT)
SETTINGS = (
    "kube.route=chat",
    "kube.stable_service=sim-stable",
    "kube.candidate_service=sim-canary",
)


def service(name: str, selector: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "selector": selector,
            "ports": [{"name": "http", "port": 8000, "targetPort": "http"}],
        },
    }


def http_route() -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HTTPRoute",
        "metadata": {"name": "chat"},
        "spec": {
            "parentRefs": [{"name": "inference-gateway"}],
            "rules": [
                {
                    "backendRefs": [
                        {"name": "sim-stable", "port": 8000},  # no weight: the CRD stores 1
                        {"name": "sim-canary", "port": 8000, "weight": 0},
                    ]
                }
            ],
        },
    }


@pytest.fixture
def weighted(kube_local, namespace, gateway_api):
    """deploy/sim (two replicas), a stable and a candidate Service, Traefik serving the
    namespace's Gateway, and the HTTPRoute over the two Services, accepted by it."""
    # a preStop longer than Traefik's 2 s throttle on EndpointSlice changes (docs/facts.md)
    objs = sim_objects(replicas=2, gpus=1, prestop=4)
    objs += [
        service("sim-stable", {"app": DEPLOYMENT}),
        service("sim-canary", {"app": f"{DEPLOYMENT}-canary"}),
    ]
    kube_local.apply_objects(objs, namespace)
    apps = client.AppsV1Api(kube_local.api)
    wait_for(
        lambda: (
            (apps.read_namespaced_deployment(DEPLOYMENT, namespace).status.ready_replicas or 0) == 2
        ),
        90,
        "two ready replicas",
    )
    gw = kube_local.gateway(namespace)
    created = gateway_api.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, http_route()
    )
    wait_route_accepted(gateway_api, namespace, "chat")
    return created, gw


def target(kube_local, namespace, tmp_path, *sets) -> KubeTarget:
    base = [f"kube.kubeconfig={kube_local.kubeconfig}", f"kube.namespace={namespace}"]
    return KubeTarget(load_config(None, base + ["replicas=2", *sets]), tmp_path / "run")


def route_spec(custom, namespace: str) -> dict:
    return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat")["spec"]


def weights(custom, namespace: str) -> list:
    refs = route_spec(custom, namespace)["rules"][0]["backendRefs"]
    return [r.get("weight") for r in refs]


def applied(t: KubeTarget, percent: float | None) -> list:
    """The gateway_updated events that carry this split (None: the route as it was)."""
    out = []
    for e in t.events():
        if e.kind == "gateway_updated" and e.detail.get("route") == "chat":
            split = e.detail.get("split")
            if (split or {}).get("percent") == percent or (percent is None and split is None):
                out.append(e)
    return out


def served_by(gw, n: int) -> list[str]:
    """Send n requests through the gateway; the pod address each went to, from its
    access log (joined by X-Request-Id)."""
    ids = [f"split-{uuid.uuid4().hex[:12]}" for _ in range(n)]
    for rid in ids:
        r = httpx.get(f"{gw.url}/v1/models", headers={"X-Request-Id": rid}, timeout=10)
        assert r.status_code == 200, r.text
    want = set(ids)

    def logged() -> list[str] | None:
        lines = [json.loads(x) for x in gw.access_log.read_text().splitlines() if x.strip()]
        got = {d.get("request_X-Request-Id"): d["ServiceAddr"] for d in lines}
        return [got[i] for i in ids] if want <= got.keys() else None

    return wait_for(logged, 10, "the gateway's access lines")


def ip(pod) -> str:
    return pod.address.rsplit(":", 1)[0]


def slice_ips(kube_local, namespace: str, svc: str) -> set[str]:
    disc = client.DiscoveryV1Api(kube_local.api)
    slices = disc.list_namespaced_endpoint_slice(
        namespace, label_selector=f"kubernetes.io/service-name={svc}"
    ).items
    return {a for s in slices for e in s.endpoints or [] if e.conditions.ready for a in e.addresses}


def candidate_gone(kube_local, namespace: str) -> bool:
    apps = client.AppsV1Api(kube_local.api)
    try:
        apps.read_namespaced_deployment(CANDIDATE, namespace)
        return False
    except ApiException as exc:
        return exc.status == 404


def test_a_weighted_canary_runs_its_candidate_behind_its_service_moves_the_weights_and_puts_back(
    kube_local, namespace, weighted, gateway_api, tmp_path
):
    """The candidate Deployment's pods are watched and selected by the candidate Service
    alone; each weight is on the route, counts as applied once the gateway accepted it
    (a gateway held still has not), and the gateway then sends the candidate its share;
    the end puts the rule back exactly and removes the candidate."""
    created, gw = weighted
    custom = gateway_api
    t = target(kube_local, namespace, tmp_path, *SETTINGS)
    t.start()
    try:
        assert t.weight_blocker() is None
        baseline = {ip(p) for p in t.ready_pods()}
        t.start_candidate("v2")
        assert weights(custom, namespace) == [100, 0]
        first = wait_for(lambda: [p for p in t.ready_pods() if p.version == "v2"], 90, "v2 ready")
        t.scale_candidate(2)
        pods = wait_for(
            lambda: [p for p in t.ready_pods() if p.version == "v2"][1:] and t.ready_pods(),
            90,
            "two v2 replicas ready",
        )
        v2 = {ip(p) for p in pods if p.version == "v2"}
        assert ip(first[0]) in v2 and len(v2) == 2 and not v2 & baseline
        # the Services select each version alone: the route's two backends are the versions
        wait_for(lambda: slice_ips(kube_local, namespace, "sim-canary") == v2, 30, "canary slice")
        assert slice_ips(kube_local, namespace, "sim-stable") == baseline

        assert {a.rsplit(":", 1)[0] for a in served_by(gw, 10)} <= baseline  # weight 0
        traefik = gw.daemons.procs["traefik"].pid
        os.killpg(traefik, signal.SIGSTOP)  # a gateway that has not programmed it yet
        try:
            t.set_weight(50)
            assert weights(custom, namespace) == [50, 50]
            threading.Event().wait(1.5)
            assert not applied(t, 50)  # not applied before the gateway says so
        finally:
            os.killpg(traefik, signal.SIGCONT)
        (event,) = wait_for(lambda: applied(t, 50), 30, "the gateway to accept 50%")
        assert event.detail["split"]["version"] == "v2"
        to_v2 = [a for a in served_by(gw, 40) if a.rsplit(":", 1)[0] in v2]
        assert 14 <= len(to_v2) <= 26, len(to_v2)  # 50% of 40, within the split tolerance

        t.end_split()
        assert route_spec(custom, namespace) == created["spec"]  # exactly as it was
        wait_for(lambda: applied(t, None), 30, "the gateway to accept the route as it was")
        wait_for(lambda: candidate_gone(kube_local, namespace), 30, "the candidate removed")
        wait_for(lambda: not [p for p in t.pods() if p.version == "v2"], 60, "v2 pods gone")
    finally:
        t.close()
    dep = client.AppsV1Api(kube_local.api).read_namespaced_deployment(DEPLOYMENT, namespace)
    assert "rollcheck.io/restore-pending" not in (dep.metadata.annotations or {})
    assert dep.spec.template.metadata.labels["version"] == "v1"  # the baseline untouched


def test_an_interrupted_weighted_canary_is_put_back_by_kube_restore(
    kube_local, namespace, weighted, gateway_api, tmp_path
):
    """The harness dies at 10% with its candidate running: `rollcheck kube-restore` puts
    the route's rule back and removes the candidate Deployment."""
    created, _gw = weighted
    t = target(kube_local, namespace, tmp_path, *SETTINGS)
    t.start()
    t.start_candidate("v2")
    wait_for(lambda: [p for p in t.ready_pods() if p.version == "v2"], 90, "v2 ready")
    t.set_weight(10)
    assert weights(gateway_api, namespace) == [90, 10]
    t.split.stop()
    for w in t.watches.watches:  # the harness dies here: no close(), no restore
        w.stop()
    r = kube_restore(kube_local, namespace)
    assert r.returncode == 0, r.stderr
    assert "HTTPRoute chat rule 0 as it was" in r.stdout, r.stdout
    assert f"removed candidate Deployment {CANDIDATE}" in r.stdout, r.stdout
    assert route_spec(gateway_api, namespace) == created["spec"]
    wait_for(lambda: candidate_gone(kube_local, namespace), 30, "the candidate removed")


def test_a_weighted_canary_that_could_not_split_is_refused_before_acting(
    kube_local, namespace, weighted, gateway_api, tmp_path
):
    """Each set-up the split would not work on is refused before acting (SKIPPED with the
    line), and nothing is made."""
    core = client.CoreV1Api(kube_local.api)
    cases = [  # (settings, Service selectors changed first, what the line says)
        ((), {}, "set kube.route"),
        (SETTINGS, {"sim-canary": {"app": DEPLOYMENT}}, "selects the baseline's pods too"),
        (SETTINGS, {"sim-canary": {"app": f"{DEPLOYMENT}-canary"}, "sim-stable": {"app": "x"}},
         "does not select the pods of Deployment"),
        (("kube.route=chat", "kube.stable_service=sim-stable", "kube.candidate_service=nope"),
         {"sim-stable": {"app": DEPLOYMENT}}, "names the Service nope 0 times"),
        (SETTINGS, {}, None),  # as the fixture made it: nothing in the way
    ]  # fmt: skip
    for i, (sets, services, says) in enumerate(cases):
        for name, selector in services.items():
            core.patch_namespaced_service(name, namespace, {"spec": {"selector": selector}})
        t = target(kube_local, namespace, tmp_path / str(i), *sets)
        t.start()
        try:
            blocker = t.weight_blocker()
        finally:
            t.close()
        if says is None:
            assert blocker is None, blocker
        else:
            assert blocker is not None and says in blocker, (says, blocker)
    assert candidate_gone(kube_local, namespace)
    assert weights(gateway_api, namespace) == [1, 0]  # as stored: the CRD defaults weight to 1
    # a Deployment of the candidate's name already there (an interrupted run's) is not
    # taken over
    left = sim_objects(replicas=0)[0]
    left["metadata"]["name"] = CANDIDATE
    client.AppsV1Api(kube_local.api).create_namespaced_deployment(namespace, left)
    t = target(kube_local, namespace, tmp_path / "left", *SETTINGS)
    t.start()
    try:
        blocker = t.weight_blocker()
    finally:
        t.close()
    assert blocker is not None and f"a Deployment {CANDIDATE} is there already" in blocker


def test_the_weighted_canary_through_a_real_gateway_splits_each_step_at_its_weight(
    kube_local, namespace, weighted, gateway_api, tmp_path
):
    """`pytest -k weighted_canary --target kube` as a user runs it, through Traefik: every
    stream traced to its pod by the gateway's access log, the candidate's share at each
    step within the tolerance of its weight, and promoted (or rolled back for a candidate's
    stream the gateway cut, and for nothing else); then the route's rule is as it was and
    the candidate gone. (The verdict is printed: the streams Traefik broke are
    the run's own finding, docs/facts.md.)"""
    created, gw = weighted
    r, summaries = run_scenarios(
        tmp_path / "reports",
        "weighted_canary",
        f"kube.namespace={namespace}",
        "replicas=2",
        f"kube.gateway_url={gw.url}",
        f"kube.gateway_log_files=[{gw.access_log}]",
        *SETTINGS,
        "kube.image=localhost/rollcheck/sim:{version}",  # the candidate a new image
        KUBE_LOCAL_TTFT,
        options=("--target", "kube", f"--kubeconfig={kube_local.kubeconfig}"),
    )
    assert len(summaries) == 1, r.stdout[-3000:] + r.stderr[-2000:]
    (summary,) = summaries
    result = summary.get("weighted_canary") or {}
    shares = [
        (s["percent"], s.get("candidate"), s.get("requests")) for s in result.get("steps", [])
    ]
    print("weighted canary through Traefik (percent, candidate, streams):", shares)
    print("verdict:", summary["verdict"], not_passing(summary))
    (split,) = [c for c in summary["checks"] if c["name"] == "weighted_split"]
    assert split["status"] == "pass", (split, r.stdout[-3000:])
    if result["action"] == "promoted":
        assert [s[0] for s in shares] == [10, 50, 100], shares
    else:
        # Traefik cuts a stream now and then (200, then the connection closed with no
        # origin answer: docs/facts.md, not explained yet). One of the candidate's is a
        # broken stream of the candidate's, and the step rolls back, as it should; no
        # other reason may roll it back.
        (judged,) = [c for c in summary["checks"] if c["name"] == "weighted_candidate"]
        assert judged["status"] == "fail", judged
        said = judged["observed"]
        assert "of the candidate's" in said and "streams broke (" in said, judged
        assert not any(w in said for w in ("TTFT", "ITL", "goodput", "golden")), judged
        assert result["action"].startswith("rolled back at "), result["action"]
    assert route_spec(gateway_api, namespace) == created["spec"]
    wait_for(lambda: candidate_gone(kube_local, namespace), 60, "the candidate removed")


def gateway_objects(custom, namespace: str, cls: str) -> None:
    """A GatewayClass no controller serves, a Gateway of it, and a route "chat-objects"
    over the two Services attached to that Gateway: objects alone."""
    custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "gatewayclasses",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GatewayClass",
            "metadata": {"name": cls},
            "spec": {"controllerName": "example.com/no-controller"},
        },
    )
    gateway = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Gateway",
        "metadata": {"name": "objects-gateway"},
        "spec": {
            "gatewayClassName": cls,
            "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}],
        },
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "gateways", gateway)
    route = http_route()
    route["metadata"]["name"] = "chat-objects"
    route["spec"]["parentRefs"] = [{"name": "objects-gateway"}]
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, route)


def test_shadow_mirrors_only_through_a_gateway_class_that_lists_the_mirror(
    kube_local, namespace, weighted, gateway_api, tmp_path
):
    """A RequestMirror filter on a gateway that lacks it can fail every request of the
    rule (Traefik v3.6 accepts the route and answers 500, docs/facts.md): shadow is
    refused before acting unless the route's GatewayClass lists HTTPRouteRequestMirror
    (Traefik's does not), or lists no features and kube.gateway_mirrors says so."""
    custom = gateway_api

    def blocker(*sets: str) -> str | None:
        t = target(kube_local, namespace, tmp_path / str(len(list(tmp_path.iterdir()))), *sets)
        t.start()
        try:
            return t.mirror_blocker()
        finally:
            t.close()

    # Traefik's class lists its features, the mirror not among them: refused, whatever
    # kube.gateway_mirrors says
    for sets in (SETTINGS, (*SETTINGS, "kube.gateway_mirrors=true")):
        said = blocker(*sets)
        assert said is not None and "GatewayClass rollcheck-traefik" in said, said
        assert "HTTPRouteRequestMirror is not among" in said, said
    assert "shadow on a cluster mirrors by a Gateway API HTTPRoute" in blocker()

    cls = f"rollcheck-objects-{namespace}"[:63]
    on_objects = ("kube.route=chat-objects", *SETTINGS[1:])
    try:
        gateway_objects(custom, namespace, cls)
        said = blocker(*on_objects)  # a class that lists nothing: the user's word decides
        assert said is not None and f"GatewayClass {cls} lists no status.supportedFeatures" in said
        assert "kube.gateway_mirrors=true" in said
        assert blocker(*on_objects, "kube.gateway_mirrors=true") is None
        features = [{"name": "HTTPRoute"}, {"name": "HTTPRouteRequestMirror"}]
        custom.patch_cluster_custom_object_status(
            GROUP, VERSION, "gatewayclasses", cls, {"status": {"supportedFeatures": features}}
        )
        assert blocker(*on_objects) is None
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, "gatewayclasses", cls)
    assert weights(custom, namespace) == [1, 0] and "filters" not in route_spec(custom, namespace)


def test_shadow_through_traefik_is_skipped_with_the_reason_and_nothing_changed(
    kube_local, namespace, weighted, gateway_api, tmp_path
):
    """`pytest -k shadow --target kube` through Traefik: SKIPPED with the line naming the
    missing feature, the route as it was and no candidate made."""
    created, gw = weighted
    r, (summary,) = run_scenarios(
        tmp_path / "reports",
        "shadow",
        f"kube.namespace={namespace}",
        "replicas=2",
        f"kube.gateway_url={gw.url}",
        *SETTINGS,
        options=("--target", "kube", f"--kubeconfig={kube_local.kubeconfig}"),
    )
    assert summary["verdict"] == "skipped", summary
    assert "HTTPRouteRequestMirror is not among" in summary["reason"], summary["reason"]
    assert "SKIPPED" in r.stdout and "Traceback" not in r.stdout
    assert route_spec(gateway_api, namespace) == created["spec"]
    assert candidate_gone(kube_local, namespace)
