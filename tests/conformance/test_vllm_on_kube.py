"""Real vLLM on real Kubernetes: scripts/build-vllm's CPU build as pods that kube-local's
kubelets run (harness/cluster/kubelocal/vllm.py), drained as a user drains a deployment
before an engine upgrade (`pytest -k "drain and pod" --target kube`). With vLLM's own
shutdown timeout (0) the answers in flight at SIGTERM are cut and the drain FAILs; with
a drain timeout that covers them it PASSes. Two engine pods at a time and the one that
replaces the drained pod (about 13 GB): one Deployment, then the other."""

from __future__ import annotations

import pytest
from kubernetes import client

from harness.cluster.kubelocal.vllm import vllm_objects
from harness.engines import vllm
from tests.kube.conftest import create_namespace, ready_pods, start_kube_local, wait_for
from tests.scenario_runs import run_scenarios

REPLICAS = 2


@pytest.fixture(scope="module")
def kube(tmp_path_factory):
    """kube-local of its own (the kube tier's runs the simulator; this one stops when the
    module ends and frees its memory)."""
    vllm.check_memory(REPLICAS + 1)
    kl = start_kube_local(tmp_path_factory.mktemp("kube-vllm"), gpus_per_node=4)
    yield kl
    kl.stop()


@pytest.fixture
def deployed(kube, request):
    """Real vLLM (shutdown timeout from the test's parameter) in a namespace of its own,
    served by an ingress; the namespace goes, and its pods with it, before the next."""
    shutdown_timeout_s = request.param
    core = client.CoreV1Api(kube.api)
    ns = f"vllm-shutdown-{shutdown_timeout_s}"
    create_namespace(kube, ns)
    try:
        kube.apply_objects(vllm_objects(shutdown_timeout_s=shutdown_timeout_s), ns)
        # a start is about a minute here, minutes with a cold compile cache
        wait_for(
            lambda: len(ready_pods(kube, ns)) == REPLICAS,
            900,
            "the vllm pods to be Ready",
            poll_s=1,
        )
        yield ns, kube.ingress("vllm", ns)
    finally:
        kube.stop_ingresses(ns)
        core.delete_namespace(ns)
        wait_for(lambda: not core.list_namespaced_pod(ns).items, 120, "the vllm pods to go")


@pytest.mark.parametrize(
    "deployed, verdict",
    [(0, "fail"), (45, "pass")],  # 45 s: engine.kind=vllm's own (harness/config/schema.py)
    ids=["vllm-default-shutdown-timeout", "shutdown-timeout-covers-the-answers"],
    indirect=["deployed"],
)
def test_a_pod_drain_of_real_vllm(kube, deployed, verdict, tmp_path):
    ns, ingress = deployed
    r, summaries = run_scenarios(
        tmp_path / "reports",
        "drain and pod",
        "engine.kind=vllm",  # the real engine's time scale (harness/config/schema.py)
        "load.model=m",
        # answers long enough to be in flight when the kubelet's SIGTERM really lands: it
        # comes after the deletion by the kubelet's own delay (seconds on a busy machine),
        # and 60-token answers sent a second before the eviction had finished by then
        # (both complete, the FAIL expected of timeout 0 a PASS; CI, 2026-12-05)
        "load.max_tokens=[{tokens: 200}]",
        "slo.calibrate=always",  # TTFT judged by what these CPUs do, measured first
        f"kube.namespace={ns}",
        "kube.deployment=vllm",
        f"replicas={REPLICAS}",
        f"kube.gateway_url={ingress.url}",
        f"kube.gateway_log_files=[{ingress.nginx.access_log}, {ingress.nginx.error_log}]",
        options=("--target", "kube", f"--kubeconfig={kube.kubeconfig}"),
        timeout_s=1200,
    )
    out = r.stdout[-4000:] + r.stderr[-2000:]
    assert len(summaries) == 1, out
    (summary,) = summaries
    checks = {c["name"]: c for c in summary["checks"]}
    not_passing = {
        n: (c["status"], c.get("observed")) for n, c in checks.items() if c["status"] != "pass"
    }
    assert summary["verdict"] == verdict, (not_passing, out)
    assert r.returncode == (0 if verdict == "pass" else 1), out
    assert summary["attribution"]["traced"] > 0  # streams traced to the drained pod
    if verdict == "fail":
        # vLLM's default: the answers in flight at SIGTERM are cut, not finished
        assert checks["in_flight_streams_finish"]["status"] == "fail", not_passing
        assert summary["outcomes"]["complete"] < summary["requests"]
    else:
        assert checks["in_flight_streams_finish"]["status"] == "pass"
        assert checks["recovery_time"]["status"] == "pass"
    print(f"{verdict}: {summary['requests']} requests, outcomes {summary['outcomes']}")
