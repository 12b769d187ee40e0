"""kube-local: real Kubernetes behaviour with pods run as processes by the node agent."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from kubernetes import client

from harness.client import chat_payload, make_client, stream_request
from harness.streams import Thresholds
from tests.kube.conftest import (
    apply,
    is_ready,
    ready_pods,
    sim_objects,
    wait_for,
    wait_pdb_healthy,
)


def test_api_answers_and_nodes_are_ready(kube_local):
    core = client.CoreV1Api(kube_local.api)
    nodes = core.list_node().items
    assert sorted(n.metadata.name for n in nodes) == kube_local.node_names
    assert all(is_ready(n) for n in nodes)
    assert all(n.status.allocatable["nvidia.com/gpu"] == "64" for n in nodes)
    assert client.VersionApi(kube_local.api).get_code().git_version == "v1.35.4"


def test_deploy_sim_serves_streams_through_the_gateway(kube_local, namespace):
    apply(kube_local, namespace, sim_objects())
    wait_for(lambda: len(ready_pods(kube_local, namespace)) == 2, 60, "2 ready pods")
    ingress = kube_local.ingress("rollcheck-sim", namespace)
    th = Thresholds(stall_timeout_s=5)
    with make_client(5) as http:

        def complete():
            r = stream_request(
                http, ingress.url + "/v1/chat/completions", chat_payload(None, "hello", 5), th
            )
            return r if r.outcome == "complete" else None

        record = wait_for(complete, 30, "a complete stream through the ingress", 0.3)
    assert record.tokens == 5 and record.system_fingerprint == "fp_v1"
    pod = ready_pods(kube_local, namespace)[0]
    metrics = client.CoreV1Api(kube_local.api).connect_get_namespaced_pod_proxy_with_path(
        f"{pod.metadata.name}:8000", namespace, "metrics"
    )
    assert "vllm:num_requests_running" in metrics  # the pods proxy reaches the engine


def test_deletion_runs_prestop_sigterm_and_sigkill_at_the_grace_deadline(kube_local, namespace):
    objs = sim_objects(
        # an engine that outlives its grace period: vLLM's teardown after a drain, long
        replicas=1,
        grace=3,
        prestop=1,
        args=["--shutdown-timeout=1", "--shutdown-teardown-s=30"],
    )
    apply(kube_local, namespace, objs)
    wait_for(lambda: ready_pods(kube_local, namespace), 60, "a ready pod")
    pod = ready_pods(kube_local, namespace)[0].metadata.name
    core = client.CoreV1Api(kube_local.api)
    core.delete_namespaced_pod(pod, namespace)
    wait_for(
        lambda: all(p.metadata.name != pod for p in core.list_namespaced_pod(namespace).items),
        30,
        "the pod to be gone",
    )
    events = {
        e.kind: e.t
        for e in kube_local.events.all()
        if e.pod == pod
        and e.kind in ("terminating", "prestop_started", "sigterm", "sigkill", "pod_removed")
    }
    start = events["terminating"]
    assert events["prestop_started"] - start < 0.3
    assert 0.9 < events["sigterm"] - start < 1.5
    assert 2.9 < events["sigkill"] - start < 3.6  # the teardown outlasts the grace period
    assert events["pod_removed"] > events["sigkill"]


def test_rollout_follows_max_surge_and_max_unavailable(kube_local, namespace):
    apply(kube_local, namespace, sim_objects(replicas=3))
    wait_for(lambda: len(ready_pods(kube_local, namespace)) == 3, 60, "3 ready pods")
    core = client.CoreV1Api(kube_local.api)
    apps = client.AppsV1Api(kube_local.api)
    samples = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            pods = core.list_namespaced_pod(namespace).items
            live = [p for p in pods if p.metadata.deletion_timestamp is None]
            samples.append((len(live), sum(1 for p in live if is_ready(p))))
            time.sleep(0.05)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    patch = {
        "spec": {
            "template": {
                "metadata": {"labels": {"version": "v2"}},
                "spec": {"containers": [{"name": "engine", "image": "rollcheck/sim:v2"}]},
            }
        }
    }
    apps.patch_namespaced_deployment("rollcheck-sim", namespace, patch)

    def rolled():
        pods = ready_pods(kube_local, namespace)
        all_pods = core.list_namespaced_pod(namespace).items
        return (
            len(pods) == 3
            and len(all_pods) == 3
            and all(p.spec.containers[0].image == "rollcheck/sim:v2" for p in all_pods)
        )

    wait_for(rolled, 120, "the rollout to v2")
    stop.set()
    t.join()
    assert max(live for live, _ in samples) <= 3 + 1  # maxSurge 1 (terminating pods excluded)
    assert min(ready for _, ready in samples) >= 3 - 0  # maxUnavailable 0


def test_eviction_that_breaks_the_pdb_gets_429(kube_local, namespace):
    apply(kube_local, namespace, sim_objects(replicas=2, pdb_min=2))
    wait_for(lambda: len(ready_pods(kube_local, namespace)) == 2, 60, "2 ready pods")
    wait_pdb_healthy(kube_local, namespace, 2)
    pod = ready_pods(kube_local, namespace)[0].metadata.name
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace))
    with pytest.raises(client.ApiException) as exc:
        client.CoreV1Api(kube_local.api).create_namespaced_pod_eviction(pod, namespace, eviction)
    assert exc.value.status == 429


def test_scale_to_zero_and_back(kube_local, namespace):
    apply(kube_local, namespace, sim_objects(replicas=2, pdb_min=0))
    wait_for(lambda: len(ready_pods(kube_local, namespace)) == 2, 60, "2 ready pods")
    apps = client.AppsV1Api(kube_local.api)
    core = client.CoreV1Api(kube_local.api)
    apps.patch_namespaced_deployment_scale("rollcheck-sim", namespace, {"spec": {"replicas": 0}})
    wait_for(lambda: not core.list_namespaced_pod(namespace).items, 60, "no pods")
    apps.patch_namespaced_deployment_scale("rollcheck-sim", namespace, {"spec": {"replicas": 2}})
    wait_for(lambda: len(ready_pods(kube_local, namespace)) == 2, 60, "2 ready pods again")


def test_other_images_are_refused_with_an_event(kube_local, namespace):
    objs = sim_objects(replicas=1)
    objs[0]["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:1.27"
    apply(kube_local, namespace, objs[:1])
    core = client.CoreV1Api(kube_local.api)

    def refused():
        evs = core.list_namespaced_event(namespace).items
        return [e for e in evs if e.reason == "ImageNotSupported"]

    ev = wait_for(refused, 60, "an ImageNotSupported event")[0]
    assert "rollcheck/sim" in ev.message


def test_nothing_is_left_running_after_stop(tmp_path, kube_local, monkeypatch):
    from harness.cluster.kubelocal import KubeLocal

    monkeypatch.chdir(tmp_path)
    kl = KubeLocal(Path("own"))  # relative, as `rollcheck kube-local` defaults to
    kl.start()
    apply(kl, "default", sim_objects(replicas=1, pdb_min=0))
    wait_for(lambda: ready_pods(kl, "default"), 60, "a ready pod")
    pids = [p.pid for p in kl.control_plane.procs.values()]
    pids += [r.proc.pid for r in kl.agent.runners.values() if r.proc]
    kl.stop()
    alive = [pid for pid in pids if _running(pid)]
    assert alive == []


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_the_command_stops_everything_at_sigterm_and_exits_143(tmp_path, kube_local):
    """`rollcheck kube-local` installed its own handler over harness.signals and exited 0;
    now SIGTERM stops the control plane and its pods, then exits 143, nothing listening."""
    import re
    import signal
    import socket
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "kube-local", "--nodes", "1",
         "--run-dir", str(tmp_path / "kl")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    line, seen = "", []
    deadline = time.monotonic() + 120
    while "Ctrl-C stops" not in line and time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline()
        seen.append(line)
    config = next(x for x in seen if x.startswith("kubeconfig:")).split(":", 1)[1].strip()
    port = int(re.search(r"server: https://127\.0\.0\.1:(\d+)", Path(config).read_text()).group(1))
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0, "the API server still listens"
