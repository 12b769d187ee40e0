"""The chart as a platform engineer installs it, short of a cluster: `helm lint`, `helm
template` for every supported Kubernetes version, RBAC that grants what the target asks
for and nothing it does not, no namespace of its own, Pod Security "restricted", the
GPU profile as its config, a week of nights that covers every scenario within the
chart's deadline, and a README that lists every value."""

from __future__ import annotations

import re

import pytest
import yaml

from harness import nightly
from harness.cluster.kube.access import PERMISSIONS
from harness.config.schema import load_config
from harness.estimate import estimate_scenario
from tests.chart import CHART, KUBE_VERSIONS, ROOT, objects_of, render, run_helm

pytestmark = pytest.mark.process

TARGET = {"target.deployment": "vllm", "target.gatewayUrl": "http://gw.example:80"}
# the thirteen scenario runs, as the nightly selects them (kind, parameters)
EVERY_RUN = [
    ("test_rollout[surge1-unavail0]", "rollout", {"max_surge": 1, "max_unavailable": 0}),
    ("test_rollout[surge2-unavail1]", "rollout", {"max_surge": 2, "max_unavailable": 1}),
    ("test_rollout[blue-green]", "rollout", {"max_surge": "100%", "max_unavailable": 0}),
    ("test_drain[pod]", "drain", {}),
    ("test_drain[node]", "drain", {}),
    ("test_pod_kill", "pod_kill", {}),
    ("test_oom_kill", "oom_kill", {}),
    ("test_preemption", "preemption", {}),
    ("test_scale_to_zero", "scale_to_zero", {}),
    ("test_scale_up", "scale_up", {}),
    ("test_scale_down", "scale_down", {}),
    ("test_startup", "startup", {}),
    ("test_canary", "canary", {}),
]


def test_helm_lint_passes_and_a_missing_target_is_one_line():
    r = run_helm("lint", "--strict", str(CHART), "-f", str(CHART / "ci" / "lint-values.yaml"))
    assert "1 chart(s) linted, 0 chart(s) failed" in r.stdout, r.stdout
    bad = run_helm("template", "r", str(CHART), check=False)
    assert bad.returncode != 0
    assert "target.deployment is required: the vLLM Deployment under test" in bad.stderr


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_renders_for_every_supported_kubernetes_version(version):
    docs = render(TARGET, kube_version=version)
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == [
        "ConfigMap",
        "CronJob",
        "Deployment",
        "PersistentVolumeClaim",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]


def test_refuses_a_kubernetes_version_below_the_supported_ones():
    args = ["template", "r", str(CHART), "--kube-version", "1.29.0"]
    r = run_helm(*args, *sum((["--set", f"{k}={v}"] for k, v in TARGET.items()), []), check=False)
    assert r.returncode != 0 and "kubeVersion" in r.stderr + r.stdout


def value_keys(values: dict, prefix: str = "") -> list[str]:
    """The chart's values as dotted keys; a block a user gives whole is one key."""
    whole = {"config", "podSecurityContext", "securityContext"}
    keys = []
    for k, v in values.items():
        key = prefix + k
        if isinstance(v, dict) and v and key not in whole and not key.endswith(".resources"):
            keys += value_keys(v, key + ".")
        else:
            keys.append(key)
    return keys


def test_the_readme_lists_every_value():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    listed = set(re.findall(r"^\| `([^`]+)` \|", readme, re.M))
    keys = value_keys(values)
    assert len(keys) > 40
    assert set(keys) == listed, (set(keys) - listed, listed - set(keys))


def test_the_default_config_is_the_gpu_profile_with_the_target_set_over_it():
    profile = yaml.safe_load((ROOT / "profiles" / "gpu.yaml").read_text())
    for key in ("namespace", "deployment"):  # the chart's target values set these
        del profile["kube"][key]
    assert yaml.safe_load((CHART / "values.yaml").read_text())["config"] == profile
    (cm,) = objects_of(render(TARGET, namespace="team-a"), "ConfigMap")
    config = yaml.safe_load(cm["data"]["rollcheck.yaml"])
    assert config["kube"] == dict(
        profile["kube"],
        namespace="team-a",
        deployment="vllm",
        gateway_url="http://gw.example:80",
        allow_node_drain=False,
        allow_preemption=False,
    )
    assert config["load"] == profile["load"]  # no key, no workers: the profile's own load


def test_a_week_of_nights_runs_every_scenario_of_the_gpu_profile_within_the_deadline():
    """The chart's deadline against the GPU profile's own estimates: the estimate of the
    whole session fits a night, and nights that each take every run's worst case still
    run every scenario within seven (the planner's choice, as the closing note shows)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    deadline = float(values["nightly"]["deadlineSeconds"])
    cfg = load_config(ROOT / "profiles" / "gpu.yaml", [])
    estimates = [estimate_scenario(n, k, cfg, "kube", p) for n, k, p in EVERY_RUN]
    assert sum(e.typical_s for e in estimates) < deadline
    worst = {nightly.run_folder_name(e.name): e.worst_s for e in estimates}
    names = list(worst)
    history: dict[str, str] = {}
    for night in range(20426, 20433):  # any seven consecutive nights
        plan = nightly.Night(deadline, "chart", nightly.RESTORE_S, night, [], worst)
        plan.order = nightly.night_order(names, history, night)
        used = 0.0
        for name in plan.order:
            if plan.may_start(name, used) is None:
                used += worst[name]  # every run to its worst case
        assert len(plan.started) >= 2 and used + nightly.RESTORE_S <= deadline
        history.update({n: f"{night}-020000-kube" for n in plan.started})
    assert set(history) == set(names)


def granted(rules: list[dict], verb: str, group: str, resource: str, name: str | None) -> bool:
    """Whether RBAC rules allow this request (the API server's matching, without
    wildcards, which the chart never uses)."""
    for r in rules:
        if verb in r["verbs"] and group in r["apiGroups"] and resource in r["resources"]:
            names = r.get("resourceNames")
            if not names or (name is not None and name in names):
                return True
    return False


def test_the_role_grants_every_permission_the_target_asks_for_and_only_by_name_on_the_deployment():
    docs = render(TARGET, namespace="team-a")
    (role,) = [r for r in objects_of(docs, "Role") if r["metadata"]["name"] == "rollcheck"]
    assert role["metadata"]["namespace"] == "team-a"
    for p in PERMISSIONS:
        resource = f"{p.resource}/{p.sub}" if p.sub else p.resource
        name = "vllm" if p.named else None
        assert granted(role["rules"], p.verb, p.group, resource, name), p
        if p.named:  # another Deployment of the namespace is not the harness's to touch
            assert not granted(role["rules"], p.verb, p.group, resource, "other"), p
    # every rule serves a row of the table, or a read the target can do without (said
    # where used): nothing else, and nothing cluster-wide without an opt-in
    optional = {
        ("get", "", "namespaces"),
        ("list", "", "services"),
        ("list", "policy", "poddisruptionbudgets"),
    }
    asked = {
        (p.verb, p.group, f"{p.resource}/{p.sub}" if p.sub else p.resource) for p in PERMISSIONS
    }
    for r in role["rules"]:
        for verb in r["verbs"]:
            for group in r["apiGroups"]:
                for resource in r["resources"]:
                    assert (verb, group, resource) in asked | optional, (verb, group, resource)
    assert not objects_of(docs, "ClusterRole") and not objects_of(docs, "ClusterRoleBinding")


def test_what_reaches_beyond_the_namespace_is_opt_in_and_no_namespace_is_hardcoded():
    docs = render(
        {
            **TARGET,
            "rbac.nodeDrain": "true",
            "rbac.gatewayLogs.namespace": "edge",
            "rbac.gatewayLogs.selector": "app=gw",
            "target.hpas": ["vllm"],
            "target.scaledObjects": ["vllm"],
        },
        namespace="team-b",
    )
    (drain,) = objects_of(docs, "ClusterRole")
    assert drain["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}
    ]
    (binding,) = objects_of(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "rollcheck", "namespace": "team-b"}
    ]
    logs = [r for r in objects_of(docs, "Role") if r["metadata"]["name"].endswith("gateway-logs")]
    assert [r["metadata"]["namespace"] for r in logs] == ["edge"]
    (role,) = [r for r in objects_of(docs, "Role") if r["metadata"]["name"] == "rollcheck"]
    assert granted(role["rules"], "patch", "autoscaling", "horizontalpodautoscalers", "vllm")
    assert not granted(role["rules"], "patch", "autoscaling", "horizontalpodautoscalers", "x")
    assert granted(role["rules"], "patch", "keda.sh", "scaledobjects", "vllm")
    (cm,) = objects_of(docs, "ConfigMap")
    kube = yaml.safe_load(cm["data"]["rollcheck.yaml"])["kube"]
    assert kube["allow_node_drain"] is True and kube["gateway_pods_namespace"] == "edge"
    text = yaml.safe_dump_all(docs)
    for hardcoded in ("llm-staging", "ingress-nginx"):
        assert hardcoded not in text.replace("ingress-nginx-controller", "")


def pod_specs(docs: list[dict]) -> list[dict]:
    specs = [d["spec"]["template"]["spec"] for d in objects_of(docs, "Deployment")]
    specs += [
        d["spec"]["jobTemplate"]["spec"]["template"]["spec"] for d in objects_of(docs, "CronJob")
    ]
    return specs


def test_every_pod_is_admitted_by_pod_security_restricted():
    docs = render({**TARGET, "locust.workers": 2})
    specs = pod_specs(docs)
    assert len(specs) == 3  # the nightly, the report server, the Locust workers
    for spec in specs:
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {
                "drop": ["ALL"]
            }
            assert sc["readOnlyRootFilesystem"] is True
    (cron,) = objects_of(docs, "CronJob")
    job = cron["spec"]["jobTemplate"]["spec"]
    assert job["activeDeadlineSeconds"] == 21600 and job["backoffLimit"] == 0
    container = job["template"]["spec"]["containers"][0]
    assert container["command"] == ["pytest"]  # PID 1: the kubelet's SIGTERM reaches it
    assert "--fit-deadline" in container["args"]
    assert "--junitxml=/reports/{session}/junit.xml" in container["args"]
    (cm,) = objects_of(docs, "ConfigMap")
    load = yaml.safe_load(cm["data"]["rollcheck.yaml"])["load"]
    assert (load["external_workers"], load["master_bind"], load["master_port"]) == (
        2,
        "0.0.0.0",
        5557,
    )


def test_preemption_is_opt_in_and_its_roles_grant_what_it_asks():
    """rbac.preemption: a ClusterRole for the run's PriorityClass and the node's free
    accelerators, a Role for the preemptor pod in the target's namespace, and
    kube.allow_preemption in the config; each row the target asks before acting granted."""
    from harness.cluster.kube.preemption import ASKED

    assert not [
        r
        for r in objects_of(render(TARGET), "ClusterRole")
        if "preemption" in r["metadata"]["name"]
    ]
    docs = render({**TARGET, "rbac.preemption": "true"}, namespace="team-c")
    (cluster,) = objects_of(docs, "ClusterRole")
    (own,) = [r for r in objects_of(docs, "Role") if r["metadata"]["name"].endswith("preemptor")]
    assert own["metadata"]["namespace"] == "team-c"
    for verb, resource, group, namespaced in ASKED:
        rules = own["rules"] if namespaced else cluster["rules"]
        assert granted(rules, verb, group, resource, None), (verb, resource)
    (binding,) = [b for b in objects_of(docs, "ClusterRoleBinding")]
    assert binding["roleRef"]["name"] == cluster["metadata"]["name"]
    (cm,) = objects_of(docs, "ConfigMap")
    assert yaml.safe_load(cm["data"]["rollcheck.yaml"])["kube"]["allow_preemption"] is True


def test_the_weighted_canarys_route_is_granted_by_name_and_reaches_the_config():
    """target.route: the HTTPRoute and the two Services by name, the candidate Deployment
    by its name (create takes none), and kube.route etc. in the config; without it, none."""
    from harness.cluster.kube.split import asked
    from harness.config.schema import Kube

    def role(docs) -> dict:
        return next(r for r in objects_of(docs, "Role") if r["metadata"]["name"] == "rollcheck")

    plain = role(render(TARGET))
    assert not granted(plain["rules"], "patch", "gateway.networking.k8s.io", "httproutes", "chat")
    route = {
        "target.route.name": "chat",
        "target.route.rule": "1",
        "target.route.stableService": "vllm-stable",
        "target.route.candidateService": "vllm-canary",
    }
    docs = render({**TARGET, **route})
    rules = role(docs)["rules"]
    k = Kube(
        deployment="vllm",
        route="chat",
        route_rule=1,
        stable_service="vllm-stable",
        candidate_service="vllm-canary",
    )
    for verb, resource, group, name in asked(k):
        assert granted(rules, verb, group, resource, name), (verb, resource, name)
    # by name only: another route, Service or Deployment is not granted
    assert not granted(rules, "patch", "gateway.networking.k8s.io", "httproutes", "other")
    assert not granted(rules, "delete", "apps", "deployments", "vllm")
    (cm,) = objects_of(docs, "ConfigMap")
    kube = yaml.safe_load(cm["data"]["rollcheck.yaml"])["kube"]
    assert (kube["route"], kube["route_rule"]) == ("chat", 1)
    assert (kube["stable_service"], kube["candidate_service"]) == ("vllm-stable", "vllm-canary")
    assert "gateway_mirrors" not in kube  # shadow's mirror: only at the user's word
    (cm,) = objects_of(
        render({**TARGET, **route, "target.route.gatewayMirrors": "true"}), "ConfigMap"
    )
    assert yaml.safe_load(cm["data"]["rollcheck.yaml"])["kube"]["gateway_mirrors"] is True


def test_the_prefill_role_is_granted_by_name_and_reaches_the_config():
    """target.pdPrefillDeployment: get/patch on that Deployment by name (pd_rollout rolls
    and puts it back) and kube.pd_prefill_deployment in the config; without it, neither."""

    def role(docs) -> dict:
        return next(r for r in objects_of(docs, "Role") if r["metadata"]["name"] == "rollcheck")

    assert not granted(role(render(TARGET))["rules"], "patch", "apps", "deployments", "vllm-p")
    docs = render({**TARGET, "target.pdPrefillDeployment": "vllm-p"})
    rules = role(docs)["rules"]
    for verb in ("get", "patch"):
        assert granted(rules, verb, "apps", "deployments", "vllm-p")
        assert granted(rules, verb, "apps", "deployments", "vllm")
    assert granted(rules, "get", "", "pods/log", None)  # the decode pods' routes
    assert not granted(rules, "patch", "apps", "deployments", "other")
    (cm,) = objects_of(docs, "ConfigMap")
    assert yaml.safe_load(cm["data"]["rollcheck.yaml"])["kube"]["pd_prefill_deployment"] == "vllm-p"
