"""The cluster's own scalers on kube-local: real KEDA (its operator and metrics API server,
built from its Go module), Prometheus scraping the engine pods, and the HPA controller in
kube-controller-manager reading KEDA's external metrics. The scale scenarios hand them
the replica count (kube.scaler=cluster) and judge what they decide."""

from __future__ import annotations

import copy
import json
import threading
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from harness.client import http_get
from tests.kube.conftest import ready_pods, sim_objects, wait_for
from tests.scenario_runs import run_scenarios

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = {
    d["metadata"]["name"]: d
    for d in yaml.safe_load_all((ROOT / "deploy/sim/keda.yaml").read_text())
    if d
}
KUBE_LOCAL_TTFT = "slo.ttft_s=5"  # as in test_kube_target: these judge the scalers, not TTFT
# Prometheus scrapes every 1 s and each ScaledObject polls every 1 s here: 3 s lets the
# scaler see what it is handed
SCALER_SYNC = "scenario.hpa_sync_s=3"


@pytest.fixture(scope="module")
def scalers(kube_local):
    """Prometheus and KEDA on the session's kube-local, for this module only (the other
    kube tests meet KEDA's CRD without an operator acting on it)."""
    from harness.cluster.kubelocal import ScalersError

    try:
        s = kube_local.start_scalers()
    except ScalersError as exc:
        pytest.fail(f"kube-local scalers: {exc}", pytrace=False)
    yield s
    kube_local.stop_scalers()


def scaled_object(name: str, namespace: str, prometheus_url: str) -> dict:
    """deploy/sim/keda.yaml's ScaledObject `name`, pointed at kube-local's Prometheus and
    at this namespace's engines only (other tests' pods serve the same model name)."""
    so = copy.deepcopy(EXAMPLES[name])
    for trigger in so["spec"]["triggers"]:
        meta = trigger["metadata"]
        meta["serverAddress"] = prometheus_url
        meta["query"] = meta["query"].replace(
            'model_name="rollcheck-sim"', f'model_name="rollcheck-sim",namespace="{namespace}"'
        )
    return so


def create_scaled_object(kube_local, namespace: str, so: dict) -> None:
    client.CustomObjectsApi(kube_local.api).create_namespaced_custom_object(
        "keda.sh", "v1alpha1", namespace, "scaledobjects", so
    )


def deploy(kube_local, namespace: str, replicas: int):
    kube_local.apply_objects(sim_objects(replicas=replicas, pdb_min=0), namespace)
    wait_for(lambda: len(ready_pods(kube_local, namespace)) == replicas, 60, "ready pods")
    return kube_local.ingress("rollcheck-sim", namespace)


def kube_sets(kube_local, namespace: str, ingress, replicas: int) -> list[str]:
    return [
        f"kube.namespace={namespace}",
        f"replicas={replicas}",
        f"kube.gateway_url={ingress.url}",
        f"kube.gateway_log_files=[{ingress.nginx.access_log}, {ingress.nginx.error_log}]",
        KUBE_LOCAL_TTFT,
        SCALER_SYNC,
    ]


def options(kube_local) -> tuple[str, ...]:
    return ("--target", "kube", f"--kubeconfig={kube_local.kubeconfig}")


def records(summary: dict) -> list[str]:
    return (Path(summary["report"]).parent / "records.jsonl").read_text().splitlines()


def events_of(summary: dict) -> list[str]:
    return (Path(summary["report"]).parent / "events.jsonl").read_text().splitlines()


def rows(summary: dict) -> list[str]:
    return [r["what"] for r in (summary.get("scaler") or {}).get("timeline", [])]


def test_prometheus_scrapes_every_engine_pod_and_keda_serves_external_metrics(
    kube_local, scalers, namespace
):
    """The parts a ScaledObject needs: Prometheus finds each engine pod through the API
    server and scrapes vLLM's gauges, and external.metrics.k8s.io is served (the
    APIService Available), as the HPA controller reads it."""
    deploy(kube_local, namespace, replicas=2)

    def series() -> list:
        q = f'vllm:num_requests_running{{namespace="{namespace}"}}'
        r = http_get(f"{scalers.prometheus_url}/api/v1/query", params={"query": q}, timeout=2)
        return r.json()["data"]["result"] if r.status_code == 200 else []

    found = wait_for(lambda: len(series()) == 2 and series(), 30, "both pods' series")
    assert {s["metric"]["pod"] for s in found} == {
        p.metadata.name for p in ready_pods(kube_local, namespace)
    }
    groups = client.ApisApi(kube_local.api).get_api_versions().groups
    assert "external.metrics.k8s.io" in {g.name for g in groups}


@pytest.mark.parametrize(
    "so_name, verdict",
    [("rollcheck-sim-queue-only", "fail"), ("rollcheck-sim", "pass")],
    ids=["queue-only-cooldown-5s", "in-flight-cooldown-30s"],
)
def test_scale_to_zero_with_real_keda_deciding(
    kube_local, scalers, namespace, tmp_path, so_name, verdict
):
    """The seed's incident on a real cluster's scaler: a busy replica (requests queue),
    then the load around one long answer stops. KEDA on queue depth with a 5 s cooldown
    takes the Deployment to 0 under the answer, and the drain (8 s) cuts it: FAIL, with
    KEDA's decision on the timeline. On running + waiting with a cooldown above the
    answer, KEDA waits for the answer and then goes to zero: PASS."""
    ingress = deploy(kube_local, namespace, replicas=1)
    create_scaled_object(
        kube_local, namespace, scaled_object(so_name, namespace, scalers.prometheus_url)
    )
    r, summaries = run_scenarios(
        tmp_path / "reports",
        "scale_to_zero",
        *kube_sets(kube_local, namespace, ingress, replicas=1),
        "scenario.recovery_s=120",
        "load.users=6",  # 7 streams for 4 slots: some always waiting while busy
        "load.step_at_s=8",  # the act: 8 s after the load started, only the answer is left
        "load.long_answer_tokens=1250",  # 25 s: still decoding 17 s after the act
        options=options(kube_local),
    )
    (summary,) = summaries
    out = r.stdout[-3000:]
    assert summary["verdict"] == verdict, out
    checks = {c["name"]: c for c in summary["checks"]}
    timeline = rows(summary)
    # KEDA's own decision, named by its event (a count of 0 has no field manager)
    assert any("KEDAScaleTargetDeactivated" in w and "from 1 to 0" in w for w in timeline), timeline
    assert any(w.endswith("set replicas 1 -> 0") for w in timeline), timeline
    assert checks["scaled_to_zero"]["status"] == "pass", checks["scaled_to_zero"]
    # handed the count with the load on, KEDA could not scale in until it showed it had
    # read the load (its lastActiveTime after the hand-over), and that came before the act
    events = [json.loads(line) for line in events_of(summary)]
    actions = [e["detail"]["action"] for e in events if e["kind"] == "action"]
    assert "scaler_read_load" in actions, actions
    assert actions.index("scaler_read_load") < actions.index("load_step"), actions
    fin = checks["long_answer_finishes"]
    longs = [r for r in map(json.loads, records(summary)) if r["tags"].get("user") == "long"]
    (answer,) = longs
    deactivated = next(
        r["at_s"] for r in summary["scaler"]["timeline"] if r["what"].endswith("-> 0")
    )
    if verdict == "fail":  # KEDA went to zero within its cooldown of the act, under the answer
        assert fin["status"] == "fail" and answer["outcome"] != "complete", (fin, answer)
        assert deactivated < 15, summary["scaler"]["timeline"]
        assert "long_answer_finishes" in r.stdout  # the failed check, in pytest's output
    else:  # KEDA waited for the answer, then its cooldown
        assert fin["status"] == "pass" and answer["outcome"] == "complete", (fin, answer)
        assert deactivated > 30, summary["scaler"]["timeline"]
    # the regular load was stopped at the act (its streams cancelled); in the good case
    # nothing else ended badly
    if verdict == "pass":
        bad = {
            k: n for k, n in summary["outcomes"].items() if n and k not in ("complete", "cancelled")
        }
        assert not bad, summary["outcomes"]


def test_scale_up_waits_for_the_real_hpa_and_reports_its_lag(
    kube_local, scalers, namespace, tmp_path
):
    """A load step, and the HPA KEDA generated (kube-controller-manager's own controller,
    reading KEDA's external metric) decides: the report has when it first asked for
    more replicas after the step and when each new replica was ready."""
    ingress = deploy(kube_local, namespace, replicas=1)
    create_scaled_object(
        kube_local, namespace, scaled_object("rollcheck-sim", namespace, scalers.prometheus_url)
    )
    t0 = time.time()
    r, summaries = run_scenarios(
        tmp_path / "reports",
        "scale_up",
        *kube_sets(kube_local, namespace, ingress, replicas=1),
        "scenario.recovery_s=120",
        "load.max_tokens=[{tokens: 400}]",  # 8 s answers: the step's in-flight count holds
        "scenario.step_users=9",
        # a queued request gets no byte until it is admitted: not hung for 30 s
        "slo.stall_timeout_s=30",
        "load.stop_timeout_s=30",
        options=options(kube_local),
    )
    (summary,) = summaries
    assert summary["verdict"] in ("pass", "fail"), r.stdout[-3000:]  # judged, not skipped
    scaler = summary["scaler"]
    by_hpa = [
        w
        for w in rows(summary)
        if w.startswith("HorizontalPodAutoscaler/keda-hpa-rollcheck-sim set replicas 1 ->")
    ]
    assert by_hpa, rows(summary)
    assert scaler["asked_after_step_s"] is not None and scaler["asked_after_step_s"] > 0
    assert scaler["new_replicas"], scaler
    assert all(
        n["ready_after_step_s"] > scaler["asked_after_step_s"] for n in scaler["new_replicas"]
    )
    assert time.time() - t0 < 600


def test_scale_down_by_the_real_scaler_names_the_pod_removed_and_why(
    kube_local, scalers, namespace, tmp_path
):
    """Two replicas, one long answer on one of them, and the count handed to KEDA's HPA:
    it wants one replica, and after its scale-down window the ReplicaSet removes one.
    The report names that pod and the ReplicaSet's reason; the answer must finish."""
    ingress = deploy(kube_local, namespace, replicas=2)
    so = scaled_object("rollcheck-sim", namespace, scalers.prometheus_url)
    so["spec"]["minReplicaCount"] = 1  # a scale-down by one, not to zero
    behavior = so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    behavior["scaleDown"]["stabilizationWindowSeconds"] = 10  # the example's 30, shortened
    create_scaled_object(kube_local, namespace, so)
    r, summaries = run_scenarios(
        tmp_path / "reports",
        "scale_down",
        *kube_sets(kube_local, namespace, ingress, replicas=2),
        "scenario.recovery_s=90",
        # 50 s: outlasts the HPA's first syncs (every 15 s) and its 10 s scale-down window
        "load.long_answer_tokens=2500",
        options=options(kube_local),
    )
    (summary,) = summaries
    removed = [w for w in rows(summary) if w.startswith("the ReplicaSet removed rollcheck-sim-")]
    assert removed, (rows(summary), r.stdout[-2000:])
    reasons = ("ready the shortest time", "newest", "a tie")  # no pod-deletion-cost here
    assert any(why in removed[0] for why in reasons), removed
    assert "the replica with the long answer" in removed[0] or "an idle replica" in removed[0]
    fin = {c["name"]: c for c in summary["checks"]}["long_answer_survives_scale_down"]
    assert fin["status"] in ("pass", "fail"), fin  # judged: the removal was seen
    assert summary["verdict"] == ("pass" if fin["status"] == "pass" else "fail"), summary["checks"]


def test_a_writer_that_reverts_the_harness_count_is_named_and_the_run_is_inconclusive(
    kube_local, scalers, namespace, tmp_path
):
    """kube.scaler=harness with another controller on the Deployment that rollcheck cannot
    hold (an HPA it holds: tests/kube/test_production_shapes.py): the harness removes one
    of two replicas, the other controller puts it back. That fight is on the timeline,
    by its field manager's name, and the run says it proved nothing (it used to pass)."""
    ingress = deploy(kube_local, namespace, replicas=2)
    apps = client.AppsV1Api(kube_local.api)
    stop = threading.Event()

    def another_controller() -> None:  # keeps 2 replicas, as a foreign autoscaler would
        while not stop.wait(1.0):
            try:
                if apps.read_namespaced_deployment("rollcheck-sim", namespace).spec.replicas == 1:
                    apps.patch_namespaced_deployment(
                        "rollcheck-sim",
                        namespace,
                        {"spec": {"replicas": 2}},
                        field_manager="another-autoscaler",
                    )
            except client.ApiException:
                pass

    fighter = threading.Thread(target=another_controller, daemon=True)
    fighter.start()
    try:
        r, summaries = run_scenarios(
            tmp_path / "reports",
            "scale_down",
            *kube_sets(kube_local, namespace, ingress, replicas=2),
            "kube.scaler=harness",
            "scenario.recovery_s=20",
            options=options(kube_local),
        )
    finally:
        stop.set()
        fighter.join(5)
    (summary,) = summaries
    checks = {c["name"]: c for c in summary["checks"]}
    fight = checks["scaler_did_not_fight"]
    assert fight["status"] == "inconclusive", (fight, r.stdout[-2000:])
    assert "another-autoscaler" in fight["reason"] and "1 -> 2" in fight["reason"], fight
    assert summary["verdict"] in ("inconclusive", "fail"), summary["verdict"]
    assert any("against the count the harness held (1)" in w for w in rows(summary)), rows(summary)
