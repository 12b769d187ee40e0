"""pd_rollout on a cluster, against kube-local: a prefill/decode deployment of the
simulator as two Deployments on real kubelets (the decode pods' sidecars call the prefill
Service, served by an ingress reading its EndpointSlices), rolled to new weights in the
scenario's orders as a user runs it; the prefill Deployment put back at the end."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from kubernetes import client

from tests.kube.conftest import ready_pods, sim_objects, wait_for
from tests.kube.test_kube_target import KUBE_LOCAL_TTFT
from tests.scenario_runs import run_scenarios

pytestmark = pytest.mark.kube

PREFILL = "rollcheck-sim-prefill"
REVISION_AWARE = ["--pd-handshake-weights", "--pd-kv-load-failure=recompute"]


def pd_objects(prefill_url: str, extra: list[str], node: str) -> tuple[list[dict], list[dict]]:
    """deploy/sim as a P/D pair: the prefill Deployment and its Service, and the decode
    Deployment (deploy/sim's name, Service and PDB) whose sidecar calls `prefill_url`.
    Every pod on one node: kube-local forwards nothing between its nodes' bridges, and a
    decode reads its KV from the prefill pod's own address (a prefill pod on another
    node's bridge could not be reached)."""
    decode = sim_objects(args=["--pd-role=decode", f"--pd-prefill-url={prefill_url}", *extra])
    prefill = copy.deepcopy(sim_objects(args=["--pd-role=prefill", *extra])[:2])
    dep, svc = prefill
    dep["metadata"]["name"] = svc["metadata"]["name"] = PREFILL
    labels = {"app": PREFILL}
    dep["metadata"]["labels"]["app"] = PREFILL
    dep["spec"]["selector"]["matchLabels"] = labels
    dep["spec"]["template"]["metadata"]["labels"]["app"] = PREFILL
    svc["spec"]["selector"] = labels
    for d in (dep, decode[0]):
        d["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        # four pods and a rollout's surge on one node of this machine's two cores
        d["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "200m"
    # the side channel a decode reads the KV from: the pod's own address (vLLM's
    # VLLM_NIXL_SIDE_CHANNEL_HOST, localhost by default)
    c = dep["spec"]["template"]["spec"]["containers"][0]
    c["env"] = [
        {
            "name": "VLLM_NIXL_SIDE_CHANNEL_HOST",
            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
        }
    ]
    return prefill, decode


@pytest.fixture
def pd_deployed(kube_local, namespace):
    node = kube_local.nodes[0].name

    def make(extra: list[str]):
        kube_local.apply_objects(pd_objects("http://unset", extra, node)[0], namespace)
        service = kube_local.ingress(PREFILL, namespace)
        url = kube_local.expose_to_pods(service.url)
        _, decode = pd_objects(url, extra, node)
        kube_local.apply_objects(decode, namespace)
        wait_for(lambda: len(ready_pods(kube_local, namespace)) == 4, 90, "4 ready pods")
        return kube_local.ingress("rollcheck-sim", namespace)

    return make


def run_pd(kube_local, namespace, gateway, tmp_path, order: str):
    return run_scenarios(
        tmp_path / "reports",
        f"pd_rollout and {order}",
        f"kube.namespace={namespace}",
        "replicas=2",
        f"kube.gateway_url={gateway.url}",
        f"kube.gateway_log_files=[{gateway.nginx.access_log}, {gateway.nginx.error_log}]",
        f"kube.pd_prefill_deployment={PREFILL}",
        "kube.image=localhost/rollcheck/sim:{version}",
        "pd_rollout.engine={model_version: v2}",  # new weights: the simulator's follow it
        "pd_rollout.role_s=90",
        KUBE_LOCAL_TTFT,
        options=("--target", "kube", f"--kubeconfig={kube_local.kubeconfig}"),
    )


def prefill_template(kube_local, namespace):
    apps = client.AppsV1Api(kube_local.api)
    dep = apps.read_namespaced_deployment(PREFILL, namespace)
    return kube_local.api.sanitize_for_serialization(dep.spec.template)


def test_a_plain_pd_rollout_on_a_cluster_mixes_answers_and_puts_the_prefill_back(
    kube_local, namespace, pd_deployed, tmp_path
):
    """Prefill first, the simulator's plain handshake: mixed answers, each an old decode
    pod continuing a new prefill pod's KV (traced through the decode pods' logs, read
    through pods/log); then both Deployments' templates are as they were."""
    gateway = pd_deployed([])
    before = prefill_template(kube_local, namespace)
    r, summaries = run_pd(kube_local, namespace, gateway, tmp_path, "prefill_first")
    assert len(summaries) == 1, r.stdout[-3000:] + r.stderr[-2000:]
    (s,) = summaries
    assert s["verdict"] == "fail", (s["checks"], r.stdout[-3000:])
    pd = s["pd_rollout"]
    summary = pd["summary"]
    print("pd_rollout on kube-local, prefill first:", summary, pd["roles_finished_s"])
    assert summary["mixed"] > 0 and summary["counts"].get("v1"), summary
    for pair in summary["pairs"]:
        assert pair["prefill_pod"].startswith(PREFILL), pair  # traced to a prefill pod
        assert not pair["decode_pod"].startswith(PREFILL), pair
    assert prefill_template(kube_local, namespace) == before  # put back


def test_a_revision_aware_pd_rollout_on_a_cluster_passes(
    kube_local, namespace, pd_deployed, tmp_path
):
    """The control: the weights in the handshake and a refused KV prefilled again on the
    decode; both roles at once."""
    gateway = pd_deployed(REVISION_AWARE)
    r, (s,) = run_pd(kube_local, namespace, gateway, tmp_path, "together")
    pd = s["pd_rollout"]
    print("pd_rollout on kube-local, together, revision-aware:", pd["summary"])
    assert s["verdict"] == "pass", (
        [c for c in s["checks"] if c["status"] != "pass"],
        r.stdout[-3000:],
    )
    assert pd["summary"]["mixed"] == 0 and pd["summary"]["counts"].get("v2")
    run = Path(s["report"]).parent
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    acts = [e["detail"] for e in events if e["detail"].get("action") == "rollout"]
    assert len(acts) == 1 and acts[0]["roles"] == ["prefill", "decode"], acts  # one act
