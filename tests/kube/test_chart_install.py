"""The chart installed on kube-local as a platform team installs it: `helm install` in a
namespace that enforces Pod Security "restricted", against deploy/sim in another; a Job
made from the CronJob runs a short night in the cluster (two scenarios) with the chart's
RBAC only, plans it within its deadline, restores, and writes its reports and JUnit XML
to the volume; `rollcheck serve` shows the history and refuses what lies outside it;
`helm uninstall` leaves nothing. And the base Role alone: a node drain and a pod kill
are SKIPPED with one line per missing permission, before anything is touched."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from kubernetes import client

from harness.cluster.kube import RESTORE, KubeTarget
from harness.cluster.kubelocal.image import RUNNER, RUNNER_UID, runner_image
from harness.cluster.target import CannotRun, TargetError
from harness.config.schema import load_config
from tests.chart import CHART, ROOT, objects_of, render
from tests.kube.conftest import (
    create_namespace,
    ready_pods,
    sim_objects,
    token_kubeconfig,
    wait_for,
)

pytestmark = pytest.mark.kube

# the two scenarios of the short night, and the GPU profile scaled down to seconds
NIGHT = "drain and pod or rollout and surge1"
SCALED_DOWN = [
    "load.users=6",
    "load.max_tokens=[{tokens: 30, weight: 0.6}, {tokens: 200, weight: 0.4}]",
    "load.long_answer_tokens=300",
    "load.stop_timeout_s=10",
    "load.start_timeout_s=30",
    "slo.ttft_s=3",
    "slo.stall_timeout_s=5",
    "scenario.warmup_s=1",
    "scenario.in_flight=2",
    "scenario.steady_state_s=60",
    "scenario.cool_down_s=2",
    "scenario.recovery_s=60",
    "scenario.settle_s=60",
    "scenario.gateway_log_wait_s=5",
    "scenario.eviction_retry_s=30",
    "scenario.engine_poll_s=1",
    "ui.pod_startup_s=2",
    # no scaler runs on this kube-local: rollcheck plays it (test_scalers.py runs KEDA)
    "kube.scaler=harness",
    # kube-local's pods reach their own node's bridge only: engines through the API
    "kube.pod_access=proxy",
    "kube.image=localhost/rollcheck/sim:{version}",
    "version=v1",
    "next_version=v2",
]
DEADLINE_S = 1200
STORAGE_CLASS = "rollcheck-reports-test"


def helm_env(kube_local) -> dict:
    return dict(os.environ, KUBECONFIG=str(kube_local.kubeconfig), HELM_CACHE_HOME="/tmp/helm-c")


def helm_in(kube_local, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    from tests.chart import helm

    r = subprocess.run(
        [helm(), *args], capture_output=True, text=True, timeout=timeout, env=helm_env(kube_local)
    )
    assert r.returncode == 0, f"helm {' '.join(args)}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture
def restricted_namespace(kube_local):
    core = client.CoreV1Api(kube_local.api)
    name = f"rc{int(time.time() * 1000) % 100000}"
    create_namespace(kube_local, name)
    core.patch_namespace(
        name, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    yield name
    core.delete_namespace(name)


@pytest.fixture
def reports_volume(kube_local, tmp_path):
    """A PersistentVolume of this machine's disk for the chart's claim (kube-local has no
    provisioner), writable by the image's user as a volume of a cluster would be."""
    folder = tmp_path / "reports-volume"
    folder.mkdir()
    os.chown(folder, RUNNER_UID, RUNNER_UID)
    core = client.CoreV1Api(kube_local.api)
    name = f"rollcheck-reports-{tmp_path.name[-20:].lower().strip('_-')}"
    name = "".join(ch if ch.isalnum() or ch == "-" else "-" for ch in name)
    core.create_persistent_volume(
        {
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": STORAGE_CLASS,
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": str(folder), "type": "Directory"},
            },
        }
    )
    yield folder
    core.delete_persistent_volume(name)


def test_the_chart_installs_runs_a_night_in_the_cluster_serves_it_and_uninstalls_cleanly(
    kube_local, namespace, restricted_namespace, reports_volume
):
    core, apps = client.CoreV1Api(kube_local.api), client.AppsV1Api(kube_local.api)
    batch, rbac = client.BatchV1Api(kube_local.api), client.RbacAuthorizationV1Api(kube_local.api)
    release_ns = restricted_namespace
    # the target: deploy/sim, its engines logging each request's id (tracing without
    # the gateway's files, which a pod cannot read), behind an ingress pods can reach
    kube_local.apply_objects(sim_objects(replicas=2, args=["--enable-log-requests"]), namespace)
    wait_for(lambda: len(ready_pods(kube_local, namespace)) == 2, 90, "the engines")
    gateway = kube_local.expose_to_pods(kube_local.ingress("rollcheck-sim", namespace).url)
    before = apps.read_namespaced_deployment("rollcheck-sim", namespace)
    template = kube_local.api.sanitize_for_serialization(before.spec.template)
    kube_local.load_image(runner_image())

    values = {
        "image.repository": RUNNER,
        "image.tag": "latest",
        "image.pullPolicy": "Never",
        "target.namespace": namespace,
        "target.deployment": "rollcheck-sim",
        "target.gatewayUrl": gateway,
        "nightly.suspend": "true",  # the schedule does not fire: the test makes the Job
        "nightly.scenarios": NIGHT,
        "nightly.deadlineSeconds": DEADLINE_S,
        "nightly.terminationGracePeriodSeconds": 60,
        "nightly.resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "nightly.extraArgs": [f"--set={s}" for s in SCALED_DOWN] + ["-rs"],
        "reports.storageClassName": STORAGE_CLASS,
        "reports.size": "1Gi",
    }
    from tests.chart import sets

    helm_in(
        kube_local, "install", "rollcheck", str(CHART), "-n", release_ns, "--wait",
        "--timeout", "3m", *sets(values),
    )  # fmt: skip

    # a night now, as `kubectl create job --from=cronjob/...` makes it
    cron = batch.read_namespaced_cron_job("rollcheck-nightly", release_ns)
    job_spec = kube_local.api.sanitize_for_serialization(cron.spec.job_template.spec)
    batch.create_namespaced_job(
        release_ns,
        {
            "metadata": {
                "name": "rollcheck-now",
                "annotations": {"cronjob.kubernetes.io/instantiate": "manual"},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "CronJob",
                        "name": cron.metadata.name,
                        "uid": cron.metadata.uid,
                        "controller": True,
                    }
                ],
            },
            "spec": job_spec,
        },
    )
    started = time.monotonic()

    def job_done():
        status = batch.read_namespaced_job("rollcheck-now", release_ns).status
        return "succeeded" if status.succeeded else "failed" if status.failed else None

    try:
        ended = wait_for(job_done, DEADLINE_S, "the night's Job", poll_s=2)
    finally:
        pods = core.list_namespaced_pod(release_ns, label_selector="job-name=rollcheck-now").items
        log = "".join(core.read_namespaced_pod_log(p.metadata.name, release_ns) or "" for p in pods)
        print(log[-6000:])
    took = time.monotonic() - started
    assert ended == "succeeded", log[-6000:]
    assert took < DEADLINE_S

    # the night: planned within its Job's deadline, both scenarios PASS, restored
    assert "rollcheck: night plan: deadline " in log and "(Job rollcheck-now's" in log, log[:3000]
    assert "by the worst cases 2 of 2 runs fit" in log, log[:3000]
    assert "Traceback" not in log
    (session,) = [p for p in reports_volume.iterdir() if p.is_dir()]
    summaries = {
        s["name"]: s for s in map(json.loads, map(Path.read_text, session.glob("*/summary.json")))
    }
    assert sorted(summaries) == ["test_drain[pod]", "test_rollout[surge1-unavail0]"]
    for name, s in summaries.items():
        failing = [
            (c["name"], c.get("reason") or c.get("observed"))
            for c in s["checks"]
            if c["status"] != "pass"
        ]
        assert s["verdict"] == "pass", (name, failing, s.get("attribution"))
        assert s["attribution"]["traced"] > 0, s["attribution"]  # by the engines' logs
    after = apps.read_namespaced_deployment("rollcheck-sim", namespace)
    assert RESTORE not in (after.metadata.annotations or {})
    assert kube_local.api.sanitize_for_serialization(after.spec.template) == template
    night = json.loads((session / "night.json").read_text())
    assert len(night["started"]) == 2 and night["left"] == []
    cases = list(ET.parse(session / "junit.xml").getroot().iter("testcase"))
    assert len(cases) == 2 and not any(c.find("failure") is not None for c in cases)
    assert (reports_volume / "history.html").is_file() and (session / "index.html").is_file()

    # rollcheck serve over the volume: the history first, nothing outside the folder
    os.symlink("/etc/passwd", reports_volume / "escape.txt")
    (serve_pod,) = core.list_namespaced_pod(
        release_ns, label_selector="app.kubernetes.io/component=serve"
    ).items
    address = serve_pod.status.pod_ip

    def get(path: str) -> tuple[int, str, bytes]:
        conn = http.client.HTTPConnection(address, 8080, timeout=10)
        conn.request("GET", path)
        r = conn.getresponse()
        out = (r.status, r.getheader("Location") or "", r.read())
        conn.close()
        return out

    assert get("/")[:2] == (302, "/history.html")
    status, _, body = get("/history.html")
    assert status == 200 and session.name.encode() in body
    status, _, body = get(f"/{session.name}/junit.xml")
    assert status == 200 and body.startswith(b"<?xml")
    assert get("/../../etc/passwd")[0] == 404
    assert get("/escape.txt")[0] == 404
    assert get(f"/{session.name}/../../etc/passwd")[0] == 404

    # uninstalled: nothing of the release is left (the claim, the Jobs, the pods)
    helm_in(kube_local, "uninstall", "rollcheck", "-n", release_ns, "--wait")
    selector = "app.kubernetes.io/instance=rollcheck"

    def leftovers() -> list[str]:
        left = [f"pod/{p.metadata.name}" for p in core.list_namespaced_pod(release_ns).items]
        left += [f"job/{j.metadata.name}" for j in batch.list_namespaced_job(release_ns).items]
        left += [
            f"pvc/{c.metadata.name}"
            for c in core.list_namespaced_persistent_volume_claim(release_ns).items
        ]
        for lister in (
            core.list_namespaced_config_map,
            core.list_namespaced_service,
            core.list_namespaced_service_account,
            rbac.list_namespaced_role,
            rbac.list_namespaced_role_binding,
        ):
            left += [i.metadata.name for i in lister(release_ns, label_selector=selector).items]
        left += [
            r.metadata.name
            for r in rbac.list_namespaced_role(namespace, label_selector=selector).items
        ]
        left += [r.metadata.name for r in rbac.list_cluster_role(label_selector=selector).items]
        return left

    wait_for(lambda: not leftovers(), 120, f"the release to be gone: {leftovers()}", poll_s=1)


def chart_role(kube_local, namespace: str, drop: tuple[str, str] | None = None) -> Path:
    """The chart's ServiceAccount, Roles and bindings (nothing opted in), applied to the
    namespace; `drop` removes one (resource, verb). A kubeconfig that acts as it."""
    docs = render(
        {"target.deployment": "rollcheck-sim", "target.gatewayUrl": "http://unused"},
        namespace=namespace,
    )
    objs = [d for d in docs if d["kind"] in ("ServiceAccount", "Role", "RoleBinding")]
    if drop:
        for role in objects_of(objs, "Role"):
            for rule in role["rules"]:
                if drop[0] in rule["resources"] and drop[1] in rule["verbs"]:
                    rule["verbs"] = [v for v in rule["verbs"] if v != drop[1]]
    kube_local.apply_objects(objs, namespace)
    return token_kubeconfig(kube_local, namespace, "rollcheck", Path(kube_local.run_dir))


def refused(sets: list[str], run_dir: Path, kind: str, error: type) -> list[str]:
    """The lines a kube target for `kind` refuses to start with (nothing touched)."""
    target = KubeTarget(load_config(None, sets), run_dir, kind=kind)
    with pytest.raises(error) as info:
        target.start()
    target.close()
    return str(info.value).splitlines()


def test_the_base_role_alone_skips_a_node_drain_and_a_pod_kill_with_one_line_each(
    kube_local, namespace, tmp_path
):
    kube_local.apply_objects(sim_objects(replicas=2), namespace)
    wait_for(lambda: len(ready_pods(kube_local, namespace)) == 2, 90, "the engines")
    ingress = kube_local.ingress("rollcheck-sim", namespace)
    path = chart_role(kube_local, namespace, drop=("pods", "delete"))
    apps = client.AppsV1Api(kube_local.api)
    base = [
        f"kube.kubeconfig={path}",
        f"kube.namespace={namespace}",
        f"kube.gateway_url={ingress.url}",
        "kube.allow_node_drain=true",
        "replicas=2",
    ]
    # a pod kill by deletion needs delete on pods: SKIPPED when the target starts, nothing
    # touched (a kill by kube.kill_command needs no verb of the API)
    assert refused([*base, "kube.pod_kill=delete"], tmp_path / "kill", "pod_kill", CannotRun) == [
        f"RBAC: not allowed to delete pods in namespace {namespace}: killing a pod by "
        "deleting it (grace 0) (needed by pod_kill with kube.pod_kill: delete); grant it "
        "with the chart's Role (charts/rollcheck)"
    ]
    # a node drain: the target starts (the base Role covers it), and the scenario is
    # SKIPPED before it acts, with the one line that names the chart's value
    args = [sys.executable, "-m", "pytest", "scenarios", "-k", "drain and node", "-rs"]
    args += ["--target", "kube", f"--kubeconfig={path}", "--reports-dir", str(tmp_path / "r")]
    for s in [
        *base[1:],
        "scenario.settle_s=60",
        "scenario.warmup_s=1",
        "scenario.steady_state_s=30",
    ]:
        args += ["--set", s]
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "1 skipped" in r.stdout, r.stdout[-3000:]
    (summary,) = (tmp_path / "r").glob("*/*/summary.json")
    s = json.loads(summary.read_text())
    assert s["verdict"] == "skipped"
    assert s["reason"] == (
        "cannot drain a node here: RBAC: not allowed to patch nodes (cordon), needed by drain "
        "(node); install the chart with rbac.nodeDrain=true (a ClusterRole with get and "
        "patch on nodes)"
    )
    nodes = client.CoreV1Api(kube_local.api).list_node().items
    assert not any(n.spec.unschedulable for n in nodes)
    # an HPA of the Deployment's own that the chart was not told of (target.hpas): every
    # scenario would hold it, so the run stops before acting, naming the value to set
    client.AutoscalingV2Api(kube_local.api).create_namespaced_horizontal_pod_autoscaler(
        namespace,
        {
            "metadata": {"name": "sim-hpa"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "rollcheck-sim"},
                "minReplicas": 2,
                "maxReplicas": 3,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}],
            },
        },
    )  # fmt: skip
    assert refused(base, tmp_path / "held", "drain", TargetError) == [
        f"RBAC: not allowed to patch HorizontalPodAutoscaler sim-hpa in namespace {namespace}: "
        "it scales the Deployment, and rollcheck holds it for each scenario and puts it back "
        "(needed by every scenario); name it in the chart's target.hpas"
    ]
    assert (
        apps.read_namespaced_deployment("rollcheck-sim", namespace).metadata.annotations.get(
            RESTORE
        )
        is None
    )
