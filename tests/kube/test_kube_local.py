"""kube-local: real Kubernetes behaviour, pods run by real kubelets over containerd and runc."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from harness.client import chat_payload, make_client, stream_request
from harness.streams import Thresholds
from tests.kube.conftest import (
    ROOT,
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
    kube_local.apply_objects(sim_objects(), namespace)
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


def _stamp(line: str) -> float:
    """The kubelet's timestamp of a container log line (RFC 3339, nanoseconds, UTC)."""
    import datetime

    stamp = line.split(" ", 1)[0]
    whole, _, frac = stamp.rstrip("Z").partition(".")
    t = datetime.datetime.fromisoformat(whole).replace(tzinfo=datetime.UTC).timestamp()
    return t + float("0." + (frac or "0"))


def _follow_log(core, pod: str, namespace: str, lines: list[str]) -> threading.Thread:
    def follow():
        resp = core.read_namespaced_pod_log(
            pod, namespace, follow=True, timestamps=True, _preload_content=False,
            _request_timeout=60,
        )  # fmt: skip
        try:
            for raw in resp.stream(256):
                lines.extend(raw.decode(errors="replace").splitlines())
        except Exception:  # the container went away: the log ends
            pass

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    return t


def test_deletion_runs_prestop_then_sigterm_then_sigkill_at_the_grace_period(kube_local, namespace):
    """The kubelet's order, from what the kubelet itself writes: the preStop hook's line
    and the engine's SIGTERM line in the container log (stamped by the kubelet), then
    SIGKILL (exit 137) at the grace period counted from the deletion, preStop included."""
    objs = sim_objects(
        # an engine that outlives its grace period: vLLM's teardown after a drain, long
        replicas=1,
        grace=4,
        args=["--shutdown-timeout=1", "--shutdown-teardown-s=30"],
    )
    c = objs[0]["spec"]["template"]["spec"]["containers"][0]
    c["lifecycle"]["preStop"]["exec"]["command"] = [
        "sh", "-c", "echo preStop started > /proc/1/fd/2; sleep 1",
    ]  # fmt: skip
    kube_local.apply_objects(objs, namespace)
    wait_for(lambda: ready_pods(kube_local, namespace), 60, "a ready pod")
    pod = ready_pods(kube_local, namespace)[0].metadata.name
    core = client.CoreV1Api(kube_local.api)
    lines: list[str] = []
    follower = _follow_log(core, pod, namespace, lines)
    time.sleep(0.5)  # the follow is open
    deleted = time.time()
    core.delete_namespaced_pod(pod, namespace)
    last = {}

    def gone():
        pods = [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name == pod]
        if pods:
            last["status"] = pods[0].status
        return not pods

    wait_for(gone, 30, "the pod to be gone", poll_s=0.05)
    follower.join(10)
    prestop = next(_stamp(ln) for ln in lines if "preStop started" in ln)
    sigterm = next(_stamp(ln) for ln in lines if "SIGTERM received" in ln)
    assert deleted < prestop < sigterm, lines
    assert sigterm - prestop >= 0.9  # SIGTERM only once the hook's `sleep 1` has ended
    (state,) = [cs.state.terminated for cs in last["status"].container_statuses]
    assert state is not None and state.exit_code == 137  # SIGKILL: the teardown outlasted it
    assert 4 - 1 <= state.finished_at.timestamp() - deleted <= 4 + 2  # stamps are whole seconds


def test_a_liveness_failure_restarts_the_container(kube_local, namespace):
    """An engine that answers /health 503: the kubelet's liveness probe kills and restarts
    its container, with the kubelet's own events."""
    objs = sim_objects(replicas=1, args=["--startup-s=600", "--startup-health-503"])
    c = objs[0]["spec"]["template"]["spec"]["containers"][0]
    del c["startupProbe"]
    c["livenessProbe"] |= {"periodSeconds": 1, "failureThreshold": 2}
    kube_local.apply_objects(objs[:1], namespace)
    core = client.CoreV1Api(kube_local.api)

    def restarted():
        pods = core.list_namespaced_pod(namespace).items
        statuses = [cs for p in pods for cs in (p.status.container_statuses or [])]
        return statuses if statuses and statuses[0].restart_count >= 1 else None

    wait_for(restarted, 60, "a restart after failed liveness probes", poll_s=0.2)
    reasons = {(e.reason, e.source.component) for e in core.list_namespaced_event(namespace).items}
    assert ("Unhealthy", "kubelet") in reasons and ("Killing", "kubelet") in reasons
    messages = [e.message for e in core.list_namespaced_event(namespace).items]
    assert any(
        "Liveness probe failed: HTTP probe failed with statuscode: 503" in m for m in messages
    )


def test_a_crash_loop_backs_off_10_s_then_20_s(kube_local, namespace):
    """An engine that exits at start: CrashLoopBackOff, the back-off doubling from 10 s,
    as the kubelet says in the container's waiting state and its BackOff events."""
    objs = sim_objects(replicas=1, args=["--no-such-flag"])
    kube_local.apply_objects(objs[:1], namespace)
    core = client.CoreV1Api(kube_local.api)
    seen: list[str] = []

    def backed_off_twice():
        for p in core.list_namespaced_pod(namespace).items:
            for cs in p.status.container_statuses or []:
                if cs.state.waiting and cs.state.waiting.reason == "CrashLoopBackOff":
                    if cs.state.waiting.message not in seen:
                        seen.append(cs.state.waiting.message)
        return any("back-off 20s" in m for m in seen)

    wait_for(backed_off_twice, 60, "a second, longer back-off", poll_s=0.2)
    assert "back-off 10s" in seen[0], seen
    events = core.list_namespaced_event(namespace).items
    backoff = [e for e in events if e.reason == "BackOff" and e.source.component == "kubelet"]
    assert backoff and "Back-off restarting failed container" in backoff[0].message


def test_rollout_follows_max_surge_and_max_unavailable(kube_local, namespace):
    kube_local.apply_objects(sim_objects(replicas=3), namespace)
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
                "spec": {"containers": [{"name": "engine", "image": "localhost/rollcheck/sim:v2"}]},
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
            and all(p.spec.containers[0].image == "localhost/rollcheck/sim:v2" for p in all_pods)
        )

    wait_for(rolled, 120, "the rollout to v2")
    stop.set()
    t.join()
    assert max(live for live, _ in samples) <= 3 + 1  # maxSurge 1 (terminating pods excluded)
    assert min(ready for _, ready in samples) >= 3 - 0  # maxUnavailable 0


def test_eviction_that_breaks_the_pdb_gets_429(kube_local, namespace):
    kube_local.apply_objects(sim_objects(replicas=2, pdb_min=2), namespace)
    wait_for(lambda: len(ready_pods(kube_local, namespace)) == 2, 60, "2 ready pods")
    wait_pdb_healthy(kube_local, namespace, 2)
    pod = ready_pods(kube_local, namespace)[0].metadata.name
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace))
    with pytest.raises(client.ApiException) as exc:
        client.CoreV1Api(kube_local.api).create_namespaced_pod_eviction(pod, namespace, eviction)
    assert exc.value.status == 429


def test_scale_to_zero_and_back(kube_local, namespace):
    kube_local.apply_objects(sim_objects(replicas=2, pdb_min=0), namespace)
    wait_for(lambda: len(ready_pods(kube_local, namespace)) == 2, 60, "2 ready pods")
    apps = client.AppsV1Api(kube_local.api)
    core = client.CoreV1Api(kube_local.api)
    apps.patch_namespaced_deployment_scale("rollcheck-sim", namespace, {"spec": {"replicas": 0}})
    wait_for(lambda: not core.list_namespaced_pod(namespace).items, 60, "no pods")
    apps.patch_namespaced_deployment_scale("rollcheck-sim", namespace, {"spec": {"replicas": 2}})
    wait_for(lambda: len(ready_pods(kube_local, namespace)) == 2, 60, "2 ready pods again")


def test_an_image_that_was_not_imported_cannot_be_pulled_and_nothing_leaves_the_machine(
    kube_local, namespace
):
    """A registry image: the node's containerd pulls only through an address on this
    machine that refuses, so the pod waits in ErrImagePull / ImagePullBackOff."""
    objs = sim_objects(replicas=1)
    objs[0]["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:1.27"
    kube_local.apply_objects(objs[:1], namespace)
    core = client.CoreV1Api(kube_local.api)

    def waiting():
        for p in core.list_namespaced_pod(namespace).items:
            for cs in p.status.container_statuses or []:
                if cs.state.waiting and cs.state.waiting.reason in (
                    "ErrImagePull",
                    "ImagePullBackOff",
                ):
                    return cs.state.waiting
        return None

    wait_for(waiting, 60, "ErrImagePull")
    failed = [
        e.message for e in core.list_namespaced_event(namespace).items if e.reason == "Failed"
    ]
    assert any("docker.io/library/nginx:1.27" in m and "127.0.0.1:9" in m for m in failed), failed


def test_a_pod_ip_answers_through_its_bridge_and_the_pod_has_no_default_route(
    kube_local, namespace
):
    import subprocess

    import httpx

    kube_local.apply_objects(sim_objects(replicas=1, pdb_min=0), namespace)
    wait_for(lambda: ready_pods(kube_local, namespace), 60, "a ready pod")
    pod = ready_pods(kube_local, namespace)[0]
    node = next(n for n in kube_local.nodes if n.name == pod.spec.node_name)
    assert pod.status.pod_ip.startswith(node.ip.rsplit(".", 1)[0] + ".")  # the node's subnet
    assert pod.status.host_ip == node.ip
    assert httpx.get(f"http://{pod.status.pod_ip}:8000/health", timeout=5).status_code == 200
    netns = list((node.dir / "state").glob("**/netns/cni-*"))
    assert netns, "no network namespace under the node's state folder"
    routes = [
        subprocess.run(
            ["nsenter", f"--net={ns}", "ip", "route"], capture_output=True, text=True
        ).stdout
        for ns in netns
    ]
    assert any(node.ip.rsplit(".", 1)[0] in r for r in routes), routes
    assert not any("default" in r for r in routes), routes


def _left(traces: dict) -> dict:
    import subprocess

    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    rules = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True).stdout
    mounts = Path("/proc/self/mountinfo").read_text()
    return {
        "processes": [pid for pid in traces["pids"] if _running(pid)],
        "bridges": [b for b in traces["bridges"] if f" {b}:" in links],
        "rules": [b for b in traces["bridges"] if b in rules],
        "mounts": [ln.split()[4] for ln in mounts.splitlines() for d in traces["dirs"] if d in ln],
    }


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_the_command_stops_everything_at_sigterm_and_exits_143(tmp_path, kube_local):
    """`rollcheck kube-local` installed its own handler over harness.signals and exited 0;
    now SIGTERM stops the control plane, the node and its pod (and the Gateway API
    implementation --gateway-api started), then exits 143: nothing listening, and no
    process, container, bridge, rule or mount left."""
    import json
    import re
    import signal
    import socket
    import subprocess
    import sys

    from kubernetes import config as kconfig

    from harness.cluster.kubelocal.node import _container_pids
    from harness.proc import PID_DIR

    run_dir = Path("kl")  # relative, as `rollcheck kube-local` defaults to
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "kube-local", "--nodes", "1",
         "--run-dir", str(run_dir), "--apply", str(ROOT / "deploy/sim/sim.yaml"),
         "--gateway-api"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        cwd=tmp_path,
    )  # fmt: skip
    line, seen = "", []
    deadline = time.monotonic() + 120
    while "Ctrl-C stops" not in line and time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline()
        seen.append(line)
    config = next(x for x in seen if x.startswith("kubeconfig:")).split(":", 1)[1].strip()
    port = int(re.search(r"server: https://127\.0\.0\.1:(\d+)", Path(config).read_text()).group(1))
    # --gateway-api: Traefik serves the namespace's Gateway (no route yet: its own 404)
    said = next(x for x in seen if x.startswith("gateway API:"))
    gw_url = re.search(r"at (http://\S+) ", said).group(1)
    assert "kube.gateway_url=" + gw_url in said and "kube.gateway_log_files=" in said
    assert httpx.get(gw_url + "/v1/models", timeout=10).status_code == 404
    core = client.CoreV1Api(kconfig.new_client_from_config(config))
    wait_for(
        lambda: sum(is_ready(p) for p in core.list_namespaced_pod("default").items) == 2,
        90, "deploy/sim's pods Ready on the one node",
    )  # fmt: skip
    (record,) = [json.loads(f.read_text()) for f in PID_DIR.glob(f"kube-node-{proc.pid}-*.json")]
    pids = [*record["pids"].values()]
    traces = {
        "pids": [p for p, _ in pids] + _container_pids(Path(record["dir"]) / "runc"),
        "bridges": [record["bridge"]],
        "dirs": [str((tmp_path / run_dir).resolve()), record["sockets"]],
    }
    assert len(traces["pids"]) == 2 + 4  # containerd, the kubelet; two pods of two
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0, "the API server still listens"
    with socket.socket() as s:
        gw_port = int(gw_url.rsplit(":", 1)[1])
        assert s.connect_ex(("127.0.0.1", gw_port)) != 0, "Traefik still listens"
    assert _left(traces) == {"processes": [], "bridges": [], "rules": [], "mounts": []}
    assert not list(PID_DIR.glob(f"kube-node-{proc.pid}-*.json"))  # nothing to clean next time


def test_the_command_runs_deploy_sim_on_two_real_nodes_and_a_sigkill_is_cleaned_up_next_time(
    tmp_path, kube_local
):
    """`rollcheck kube-local --apply deploy/sim/sim.yaml`: its pods run under the kubelet on
    two nodes. SIGKILL leaves containers, shims, mounts, bridges and rules behind (they do
    not die with it); the next start's clean-up removes every one."""
    import json
    import subprocess
    import sys

    from kubernetes import config as kconfig

    from harness.cluster.kubelocal.node import _container_pids, clean_leftovers
    from harness.proc import PID_DIR

    run_dir = tmp_path / "kl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "kube-local", "--run-dir", str(run_dir),
         "--apply", str(ROOT / "deploy/sim/sim.yaml")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        line, seen = "", []
        deadline = time.monotonic() + 120
        while "Ctrl-C stops" not in line and time.monotonic() < deadline and proc.poll() is None:
            line = proc.stdout.readline()
            seen.append(line)
        assert "Ctrl-C stops" in line, "".join(seen)[-2000:]
        api = kconfig.new_client_from_config(str(run_dir / "kube" / "kubeconfig"))
        core = client.CoreV1Api(api)

        def on_two_nodes():
            pods = [p for p in core.list_namespaced_pod("default").items if is_ready(p)]
            return len(pods) == 2 and len({p.spec.node_name for p in pods}) == 2

        wait_for(on_two_nodes, 90, "deploy/sim's two pods Ready on two nodes")
        records = [json.loads(f.read_text()) for f in PID_DIR.glob(f"kube-node-{proc.pid}-*.json")]
        assert len(records) == 2
        traces = {
            "pids": [pid for r in records for pid in _container_pids(Path(r["dir"]) / "runc")],
            "bridges": [r["bridge"] for r in records],
            "dirs": [str(run_dir.resolve()), *(r["sockets"] for r in records)],
        }
        assert len(traces["pids"]) == 4  # two pods: a sandbox and the engine each
    finally:
        proc.kill()  # SIGKILL: no clean-up of its own
        proc.communicate(timeout=30)
    time.sleep(1)  # the control plane and the node daemons die with it (PDEATHSIG)
    assert _left(traces)["processes"] != []  # the containers outlive it
    assert sorted(clean_leftovers()) == ["kube-local-node-0", "kube-local-node-1"]
    assert _left(traces) == {"processes": [], "bridges": [], "rules": [], "mounts": []}


def test_a_machine_without_the_node_parts_is_told_what_to_install(tmp_path, monkeypatch):
    """No containerd, runc, CNI plugins or iptables on PATH: one line naming the Debian
    packages and the command, before anything is started (never a skip)."""
    from harness.cluster.kubelocal import KubeLocal, NodeError
    from harness.cluster.kubelocal import node as node_mod

    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: nothing is installed
    monkeypatch.setattr(node_mod, "CNI_BIN", tmp_path / "cni")
    kl = KubeLocal(tmp_path / "kl")
    with pytest.raises(NodeError) as exc:
        kl.start()
    msg = str(exc.value)
    assert "\n" not in msg and "apt-get install -y" in msg, msg
    for pkg in ("containerd", "containernetworking-plugins", "iptables", "runc"):
        assert pkg in msg
    assert kl.control_plane.daemons.procs == {}  # nothing was started
