"""A real Kubernetes control plane (kube-local) for the Kubernetes tests."""

from __future__ import annotations

import copy
import itertools
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

ROOT = Path(__file__).resolve().parents[2]
SIM = [d for d in yaml.safe_load_all((ROOT / "deploy/sim/sim.yaml").read_text()) if d]
_ns = itertools.count()


SIM_IMAGE = "localhost/rollcheck/sim"


def start_kube_local(folder: Path, **kwargs):
    """A started KubeLocal, once every node is Ready with its GPUs. Real nodes: a machine
    without root, containerd, runc, the CNI plugins or Go fails the test with the one
    line that says what is missing, never a skip."""
    from harness.cluster.kubelocal import ControlPlaneError, KubeLocal, NodeError

    kl = KubeLocal(folder, **kwargs)
    try:
        kl.start()
    except (ControlPlaneError, NodeError) as exc:
        pytest.fail(f"kube-local: {exc}", pytrace=False)
    return kl


@pytest.fixture(scope="session")
def kube_local(tmp_path_factory):
    kl = start_kube_local(tmp_path_factory.mktemp("kube-local"), gpus_per_node=64)
    _cluster_state.kl = kl
    yield kl
    kl.stop()


@pytest.fixture(scope="session")
def gateway_api(kube_local):
    """The Gateway API's standard CRDs served by kube-local's API server: the custom
    objects API to make HTTPRoutes with."""
    kube_local.gateway_api()
    return client.CustomObjectsApi(kube_local.api)


def kube_restore(kube_local, namespace: str, *sets: str, timeout_s: float = 60):
    """`rollcheck kube-restore` as a user runs it after an interrupted run: the process."""
    args = [sys.executable, "-m", "harness.cli", "kube-restore", "--kubeconfig",
            str(kube_local.kubeconfig), "--set", f"kube.namespace={namespace}"]  # fmt: skip
    for s in sets:
        args += ["--set", s]
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)


def is_ready(obj) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (obj.status.conditions or []))


def wait_for(cond, timeout_s: float, what: str, poll_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}{_cluster_state()}")


def _cluster_state() -> str:
    """Nodes, pods and the last events: printed with every timeout in these tests."""
    from kubernetes import client as c

    kl = getattr(_cluster_state, "kl", None)
    if kl is None:
        return ""
    core = c.CoreV1Api(kl.api)
    out = []
    for n in core.list_node().items:
        out.append(
            f"node {n.metadata.name} unsched={n.spec.unschedulable} taints={[t.key for t in n.spec.taints or []]} ready={is_ready(n)}"
        )
    for p in core.list_pod_for_all_namespaces().items:
        out.append(
            f"pod {p.metadata.namespace}/{p.metadata.name} node={p.spec.node_name} phase={p.status.phase} del={p.metadata.deletion_timestamp is not None}"
        )
    for e in core.list_event_for_all_namespaces().items[-8:]:
        out.append(f"event {e.reason}: {e.message}")
    out.append("node processes alive: " + str([n.alive() for n in kl.nodes]))
    return "\n" + "\n".join(out)


def sim_objects(**changes) -> list[dict]:
    """deploy/sim with changes to the Deployment: replicas, args, grace, preStop, pdb_min,
    gpus, spread."""
    objs = copy.deepcopy(SIM)
    dep, _svc, pdb = objs
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    c = pod["containers"][0]
    if "replicas" in changes:
        spec["replicas"] = changes["replicas"]
    if "args" in changes:
        c["args"] = c["args"] + changes["args"]
    if "grace" in changes:
        pod["terminationGracePeriodSeconds"] = changes["grace"]
    if "prestop" in changes:
        c["lifecycle"]["preStop"]["exec"]["command"] = ["sleep", str(changes["prestop"])]
    if "gpus" in changes:  # each pod's nvidia.com/gpu (the nodes advertise gpus_per_node)
        c["resources"]["limits"]["nvidia.com/gpu"] = str(changes["gpus"])
    if changes.get("spread"):  # one pod a node where it can (a replacement may share)
        term = {"labelSelector": {"matchLabels": {"app": "rollcheck-sim"}},
                "topologyKey": "kubernetes.io/hostname"}  # fmt: skip
        pod["affinity"] = {"podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}]}}  # fmt: skip
    if "pdb_min" in changes:
        pdb["spec"]["minAvailable"] = changes["pdb_min"]
    return objs


def create_namespace(kube_local, name: str) -> None:
    """A namespace, once its default service account exists (pods wait for it)."""
    core = client.CoreV1Api(kube_local.api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait_for(lambda: _has_default_sa(core, name), 30, "the default service account")


@pytest.fixture
def namespace(kube_local):
    core = client.CoreV1Api(kube_local.api)
    name = f"t{next(_ns)}-{int(time.time()) % 10000}"
    create_namespace(kube_local, name)
    yield name
    kube_local.stop_ingresses(name)
    core.delete_namespace(name)  # its pods terminate and free their GPUs


def _has_default_sa(core, ns) -> bool:
    try:
        core.read_namespaced_service_account("default", ns)
        return True
    except client.ApiException:
        return False


def wait_pdb_healthy(kube_local, namespace: str, n: int) -> None:
    """Wait until the PodDisruptionBudget counts n healthy pods (it lags the pods)."""
    policy = client.PolicyV1Api(kube_local.api)
    wait_for(
        lambda: (
            policy.read_namespaced_pod_disruption_budget(
                "rollcheck-sim", namespace
            ).status.current_healthy
            == n
        ),
        30,
        f"the PDB to count {n} healthy pods",
    )


def ready_pods(kube_local, namespace: str) -> list:
    core = client.CoreV1Api(kube_local.api)
    return [
        p
        for p in core.list_namespaced_pod(namespace).items
        if is_ready(p) and p.metadata.deletion_timestamp is None
    ]


def token_kubeconfig(kube_local, namespace: str, account: str, folder: Path) -> Path:
    """A kubeconfig that acts as the ServiceAccount (a token of ten minutes)."""
    core = client.CoreV1Api(kube_local.api)
    token = core.create_namespaced_service_account_token(
        account, namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token
    kc = yaml.safe_load(Path(kube_local.kubeconfig).read_text())
    kc["users"] = [{"name": account, "user": {"token": token}}]
    kc["contexts"][0]["context"]["user"] = account
    path = folder / f"{account}.kubeconfig"
    path.write_text(yaml.safe_dump(kc))
    return path
