"""Every lint rule: a manifest that trips it and one that passes."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from harness.lint import LintInputError, LintOptions, lint, parse_documents
from tests.properties import bounded

ROOT = Path(__file__).resolve().parents[1]
# deploy/vllm as a user applies it with its KEDA autoscaler (one of deploy/vllm/autoscaling/)
GOOD = (ROOT / "deploy/vllm/deployment.yaml").read_text() + (
    "---\n" + (ROOT / "deploy/vllm/autoscaling/keda.yaml").read_text()
)


KINDS = ["Deployment", "Service", "PodDisruptionBudget", "ScaledObject", "Ingress"]


def docs() -> list[dict]:
    """deploy/vllm's objects, in KINDS' order (the mutations below index them)."""
    return sorted((d for d in yaml.safe_load_all(GOOD) if d), key=lambda d: KINDS.index(d["kind"]))


def rules_of(objs: list[dict], **opts) -> set[str]:
    text = yaml.safe_dump_all(objs)
    return {f.rule for f in lint(parse_documents(text, "m.yaml"), LintOptions(**opts))}


def container(objs):
    return objs[0]["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.unit
def test_the_example_and_llm_d_settings_lint_clean():
    assert rules_of(docs()) == set()


def mutate(fn):
    objs = copy.deepcopy(docs())
    fn(objs)
    return objs


CASES = {
    "RC001": lambda o: container(o).pop("startupProbe"),
    "RC002": lambda o: container(o)["startupProbe"].update(failureThreshold=3),
    "RC003": lambda o: container(o)["livenessProbe"].update(failureThreshold=1, periodSeconds=5),
    "RC004": lambda o: o[0]["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=30),
    "RC005": lambda o: container(o).update(args=["--model=x"]),
    "RC006": lambda o: container(o).pop("lifecycle"),
    "RC007": lambda o: o[2]["spec"].update(maxUnavailable=0),
    "RC008": lambda o: o[3]["spec"]["triggers"][0]["metadata"].update(
        query="avg(DCGM_FI_DEV_GPU_UTIL)"
    ),
    "RC009": lambda o: o[3]["spec"].update(cooldownPeriod=10),
    "RC010": lambda o: (
        o[3]["spec"].update(minReplicaCount=0),
        o[3]["spec"]["triggers"][0]["metadata"].update(
            query="sum(rate(vllm:request_success_total[1m]))"
        ),
    ),
    "RC012": lambda o: container(o).update(
        command=["sh", "-c"], args=["pip install -q extra && vllm serve --shutdown-timeout=45"]
    ),
    "RC013": lambda o: o[2]["spec"].update(minAvailable="60%", maxUnavailable=None),
    "RC014": lambda o: o[4]["metadata"]["annotations"].pop(
        "nginx.ingress.kubernetes.io/proxy-read-timeout"
    ),
    "RC015": lambda o: (
        o[0]["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=7200),
        container(o)["args"].append("--shutdown-timeout=7000"),
    ),
    "RC016": lambda o: o[0]["spec"]["template"]["spec"].pop("enableServiceLinks"),
    "RC017": lambda o: o[0]["spec"]["template"]["spec"].pop("tolerations"),
    "RC019": lambda o: container(o).update(
        env=[{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "40"}],
        resources={"limits": {"memory": "32Gi", "nvidia.com/gpu": 1}},
    ),
    "RC020": lambda o: o.extend(preemptible_work()),
}


def preemptible_work(value: int = 1000) -> list[dict]:
    """A PriorityClass and a training Job under it: priorities in use beside the engine."""
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
          "metadata": {"name": "batch"}, "value": value}  # fmt: skip
    pod = {"priorityClassName": "batch", "restartPolicy": "Never",
           "containers": [{"name": "train", "image": "trainer:1"}]}  # fmt: skip
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
           "spec": {"template": {"spec": pod}}}  # fmt: skip
    return [pc, job]


@pytest.mark.unit
def test_rc020_engine_pods_below_or_beside_preemptible_work():
    """No class while a training Job has one: trips, naming it. A class above the Job's
    clears it; one equal to it trips, naming the Job; the system's own classes, which every
    cluster has, are not preemptible work."""

    def findings(objs):
        text = yaml.safe_dump_all(objs)
        return [
            f for f in lint(parse_documents(text, "m.yaml"), LintOptions()) if f.rule == "RC020"
        ]

    (f,) = findings(mutate(lambda o: o.extend(preemptible_work())))
    assert "name no PriorityClass (priority 0)" in f.why and "batch" in f.why, f.why

    def engine_class(value):
        def fn(o):
            o[0]["spec"]["template"]["spec"]["priorityClassName"] = "inference"
            o.extend(preemptible_work())
            o.append({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                      "metadata": {"name": "inference"}, "value": value})  # fmt: skip

        return fn

    assert findings(mutate(engine_class(2000))) == []
    (f,) = findings(mutate(engine_class(1000)))
    assert "inference (1000) is not above Job/train's batch (1000)" in f.why, f.why
    system = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
              "metadata": {"name": "system-cluster-critical"}, "value": 2000000000}  # fmt: skip
    assert findings(mutate(lambda o: o.append(system))) == []


@pytest.mark.unit
@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_trips(rule):
    assert rule in rules_of(mutate(CASES[rule]))


@pytest.mark.unit
def test_the_rule_table_lists_every_rule_and_selecting_one_runs_only_it():
    from harness.lint import RULES, SEVERITIES, select_rules

    # each rule has a case that trips it: a manifest, or (RC011) an option
    cases = {**CASES, "RC011": lambda o: None}
    assert sorted(r.id for r in RULES) == sorted(cases)
    opts = LintOptions(gpu_quota=2)  # 2 replicas + 1 surge need 3 GPUs: RC011
    for r in RULES:
        assert r.severity in SEVERITIES and r.summary and "\n" not in r.summary
        manifests = parse_documents(yaml.safe_dump_all(mutate(cases[r.id])), "m.yaml")
        alone = lint(manifests, opts, {r.id})
        assert alone and {f.rule for f in alone} == {r.id}
        others = select_rules(None, [r.id])
        assert r.id not in {f.rule for f in lint(manifests, opts, others)}
    assert select_rules(["RC00"], ["RC001"]) == {f"RC00{i}" for i in range(2, 10)}
    with pytest.raises(LintInputError, match="no lint rule 'RC099'"):
        select_rules(["RC099"])


@pytest.mark.unit
def test_rc016_only_a_service_named_vllm_with_service_links_trips():
    """Service links name each variable after its Service: only one named vllm makes
    VLLM_PORT; links turned off, or the Service named otherwise, pass."""
    links_on = lambda o: o[0]["spec"]["template"]["spec"].update(enableServiceLinks=True)  # noqa: E731
    assert "RC016" in rules_of(mutate(links_on))
    renamed = mutate(lambda o: (links_on(o), o[1]["metadata"].update(name="vllm-engine")))
    assert "RC016" not in rules_of(renamed)
    elsewhere = mutate(lambda o: (links_on(o), o[1]["metadata"].update(namespace="other")))
    assert "RC016" not in rules_of(elsewhere)


@pytest.mark.unit
def test_rc005_default_vllm_is_flagged_and_rc004_counts_default_grace():
    objs = mutate(
        lambda o: (
            container(o).update(args=["--model=x"]),
            o[0]["spec"]["template"]["spec"].pop("terminationGracePeriodSeconds"),
        )
    )
    assert {"RC005"} <= rules_of(objs)


@pytest.mark.unit
def test_pdb_min_available_100_percent_blocks_drains():
    def full_pdb(objs):
        del objs[2]["spec"]["maxUnavailable"]
        objs[2]["spec"]["minAvailable"] = "100%"

    assert "RC007" in rules_of(mutate(full_pdb))


@pytest.mark.unit
def test_hpa_on_gpu_and_no_cooldown():
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "vllm"},
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": "vllm"},
            "metrics": [
                {"type": "External", "external": {"metric": {"name": "DCGM_FI_DEV_GPU_UTIL"}}}
            ],
        },
    }
    assert {"RC008", "RC009"} <= rules_of(docs() + [hpa])
    hpa["spec"]["metrics"][0]["external"]["metric"]["name"] = "vllm:num_requests_waiting"
    hpa["spec"]["behavior"] = {"scaleDown": {"stabilizationWindowSeconds": 300}}
    assert rules_of(docs() + [hpa]) == set()


@pytest.mark.unit
def test_gpu_quota_for_surge():
    assert "RC011" in rules_of(docs(), gpu_quota=2)  # 2 replicas + 1 surge need 3 GPUs
    assert "RC011" not in rules_of(docs(), gpu_quota=3)


@pytest.mark.unit
def test_non_inference_deployments_are_ignored():
    objs = mutate(lambda o: container(o).update(image="nginx:1.27", args=[]))
    assert rules_of(objs) == set()


@pytest.mark.parametrize(
    "text, message",
    [
        ("a: [unclosed\n", "document 1 line"),
        (
            "kind: Deployment\nmetadata: {name: x}\nspec: {replicas: 1, template: {spec: {}}}\n",
            "has no containers",
        ),
        (
            "kind: Deployment\nmetadata: {name: x}\nspec: {replica: 1}\n",
            "unknown field spec.replica",
        ),
        (
            "---\nkind: Service\n---\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n"
            "    spec:\n      terminationGracePeriodSeconds: -5\n      containers: [{name: a, image: vllm}]\n",
            "cannot be negative",
        ),
    ],
)
@pytest.mark.unit
def test_bad_input_names_file_and_document(text, message):
    with pytest.raises(LintInputError, match=message):
        lint(parse_documents(text, "bad.yaml"))


def run_cli(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "lint", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.process
def test_cli_formats_exit_codes_and_stdin(tmp_path):
    assert run_cli(str(ROOT / "deploy/vllm")).returncode == 0
    assert run_cli(str(ROOT / "deploy/sim")).returncode == 1  # keda.yaml's incident example
    bad = yaml.safe_dump_all(mutate(CASES["RC005"]))
    r = run_cli("-", "--format", "json", stdin=bad)
    assert r.returncode == 1 and json.loads(r.stdout)[0]["rule"] == "RC005"
    r = run_cli("-", "--format", "github", stdin=bad)
    assert r.stdout.startswith("::error file=<stdin>") and "RC005" in r.stdout
    warn_only = yaml.safe_dump_all(mutate(CASES["RC006"]))
    assert run_cli("-", stdin=warn_only).returncode == 0
    assert run_cli("-", "--fail-on", "warning", stdin=warn_only).returncode == 1
    r = run_cli("--rules")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == len(CASES) + 1  # and RC011
    assert r.stdout.splitlines()[4].split()[:2] == ["RC005", "error"]
    r = run_cli("-", "--select", "RC006,RC005", "--ignore", "RC005", stdin=bad)
    assert r.returncode == 0 and r.stdout.strip() == "no findings"
    r = run_cli("-", "--format", "json", "--select", "RC005", stdin=bad)
    assert r.returncode == 1 and {f["rule"] for f in json.loads(r.stdout)} == {"RC005"}
    r = run_cli("-", "--ignore", "RC5", stdin=bad)
    assert r.returncode == 2 and "no lint rule 'RC5'" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "x.yaml").write_text("a: [b\n")
    r = run_cli(str(tmp_path / "x.yaml"))
    assert r.returncode == 2 and "x.yaml: document 1" in r.stderr and "Traceback" not in r.stderr


def findings_of(objs: list[dict], **opts):
    return lint(parse_documents(yaml.safe_dump_all(objs), "m.yaml"), LintOptions(**opts))


@pytest.mark.unit
@pytest.mark.parametrize(
    "command, args, severity",
    [
        (["/bin/bash", "-ec"], ["cd /models && vllm serve x --shutdown-timeout=45"], "error"),
        (["sh", "-c"], ["vllm serve x --shutdown-timeout=45"], "warning"),  # bash may exec it
        (["/entrypoint.sh"], [], "warning"),  # cannot see inside
        (["sh", "-c"], ["cd /models && exec vllm serve x --shutdown-timeout=45"], None),
        (["sh", "-c"], ["exec env A=1 vllm serve x --shutdown-timeout=45"], None),
        (["vllm", "serve"], ["x", "--shutdown-timeout=45"], None),
    ],
)
def test_rc012_the_engine_must_get_sigterm(command, args, severity):
    objs = mutate(lambda o: container(o).update(command=command, args=args))
    got = [f.severity for f in findings_of(objs) if f.rule == "RC012"]
    assert got == ([severity] if severity else [])


@pytest.mark.unit
@pytest.mark.parametrize(
    "replicas, min_available, trips",
    [(2, "60%", True), (3, "67%", True), (3, "66%", False), (10, "90%", False), (2, "50%", False)],
)
def test_rc013_min_available_percentages_round_up(replicas, min_available, trips):
    def change(o):
        o[0]["spec"]["replicas"] = replicas
        o[2]["spec"] = {"minAvailable": min_available, "selector": o[2]["spec"]["selector"]}

    found = [f for f in findings_of(mutate(change)) if f.rule == "RC013"]
    assert bool(found) == trips
    if trips:
        assert f"rounds up to {replicas}" in found[0].why


@pytest.mark.unit
def test_rc014_proxy_read_timeout_against_the_longest_silence():
    key = "nginx.ingress.kubernetes.io/proxy-read-timeout"

    def with_timeout(v):
        return mutate(lambda o: o[4]["metadata"]["annotations"].update({key: v}))

    assert [f.severity for f in findings_of(with_timeout("90")) if f.rule == "RC014"] == ["error"]
    assert not [
        f for f in findings_of(with_timeout("90"), longest_silence_s=60) if f.rule == "RC014"
    ]
    unset = mutate(lambda o: o[4]["metadata"]["annotations"].pop(key))
    (f,) = [f for f in findings_of(unset) if f.rule == "RC014"]
    assert f.severity == "warning" and "unset (60 s by default)" in f.why
    # an Ingress in front of another Service, or of another controller, is not this rule's
    other = mutate(
        lambda o: o[4]["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"].update(
            name="web"
        )
    )
    other[4]["metadata"]["annotations"].pop(key)
    assert "RC014" not in {f.rule for f in findings_of(other)}


@pytest.mark.unit
def test_rc015_grace_caps_and_the_longest_answer():
    # deploy/vllm covers the GPU profile's longest answer (300 s), not one of 600 s
    assert "RC015" not in {f.rule for f in findings_of(docs(), longest_answer_s=300)}
    (f,) = [f for f in findings_of(docs(), longest_answer_s=600) if f.rule == "RC015"]
    assert f.severity == "error" and "preStop 15 s + the longest expected answer (600 s)" in f.why
    long = mutate(CASES["RC015"])
    (f,) = [f for f in findings_of(long) if f.rule == "RC015"]
    assert "GKE node upgrades" in f.why and "3600" in f.why
    mid = mutate(
        lambda o: o[0]["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=900)
    )
    (f,) = [f for f in findings_of(mid) if f.rule == "RC015"]
    assert "cluster-autoscaler" in f.why


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda o: o[0]["spec"]["strategy"]["rollingUpdate"].update(maxSurge="lots"),
            "spec.strategy.rollingUpdate.maxSurge: 'lots' is neither a whole number nor a percentage",
        ),
        (
            lambda o: o[2]["spec"].update(minAvailable="most"),
            "spec.minAvailable: 'most' is neither a whole number nor a percentage",
        ),
        (
            lambda o: o[4]["metadata"]["annotations"].update(
                {"nginx.ingress.kubernetes.io/proxy-read-timeout": "an hour"}
            ),
            "proxy-read-timeout 'an hour' is not a number of seconds",
        ),
    ],
)
@pytest.mark.process
def test_new_rules_refuse_bad_values_in_one_line(tmp_path, change, message):
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump_all(mutate(change)))
    r = run_cli(str(f))
    assert r.returncode == 2 and message in r.stderr and str(f) in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


# --- hostile manifests (issue 27): one line each, never a traceback or a hang -------------
@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda o: container(o).update(command="vllm serve m"),
            "command must be a list of strings",
        ),
        (lambda o: o[0]["spec"].update(replicas="two"), "spec.replicas must be a whole number"),
        (
            lambda o: o[0]["spec"]["template"]["spec"].update(containers=["vllm"]),
            "is not an object",
        ),
        (
            lambda o: o[0]["spec"]["template"]["spec"].update(terminationGracePeriodSeconds="1h"),
            "terminationGracePeriodSeconds must be a number",
        ),
        # found by the Hypothesis suite below
        (lambda o: o[0]["spec"].update(template=[None]), "spec.template must be a mapping"),
        (
            lambda o: o[0]["spec"]["template"]["spec"].update({"a\nb": 1}),
            r"unknown field spec.template.spec.'a\\nb'",
        ),
    ],
)
@pytest.mark.unit
def test_fields_of_the_wrong_type_are_one_line(change, message):
    with pytest.raises(LintInputError, match=message):
        rules_of(mutate(change))


@pytest.mark.unit
def test_an_alias_bomb_non_utf8_and_huge_files_are_one_line(tmp_path, monkeypatch):
    import harness.lint.manifests as lint_mod
    from harness.lint import load_manifests

    bomb = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    (tmp_path / "bomb.yaml").write_text("kind: ConfigMap\n" + bomb)
    with pytest.raises(LintInputError, match="alias bomb"):
        load_manifests([str(tmp_path / "bomb.yaml")])
    (tmp_path / "latin1.yaml").write_bytes("kind: Deployment # caf\xe9\n".encode("latin-1"))
    with pytest.raises(LintInputError, match="not UTF-8"):
        load_manifests([str(tmp_path / "latin1.yaml")])
    monkeypatch.setattr(lint_mod, "MAX_MANIFEST_BYTES", 1000)
    (tmp_path / "big.yaml").write_text("# pad\n" * 500)
    with pytest.raises(LintInputError, match="over the 1000 lint reads in one file"):
        load_manifests([str(tmp_path / "big.yaml")])


@pytest.mark.unit
def test_a_fifo_in_a_folder_is_skipped_with_one_line(tmp_path):
    import os

    from harness.lint import load_manifests

    (tmp_path / "ok.yaml").write_text(GOOD)
    os.mkfifo(tmp_path / "pipe.yaml")  # opening it would wait for a writer forever
    said = []
    manifests = load_manifests([str(tmp_path)], warn=said.append)
    assert said == [f"skipped {tmp_path / 'pipe.yaml'}: not a regular file"]
    assert {m.kind for m in manifests} >= {"Deployment"}
    with pytest.raises(LintInputError, match="not a regular file or a folder"):
        load_manifests([str(tmp_path / "pipe.yaml")])


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


ALL_PATHS = [p for i, d in enumerate(docs()) for p in _paths(d, (i,)) if len(p) > 1]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**12) | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


@bounded(150)
@given(where=st.sampled_from(ALL_PATHS), value=JSON)
@pytest.mark.unit
def test_any_field_set_to_any_value_lints_or_is_one_line(where, value):
    objs = copy.deepcopy(docs())
    node = objs
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    try:
        lint(parse_documents(yaml.safe_dump_all(objs), "m.yaml"))
    except LintInputError as exc:
        assert "\n" not in str(exc)


@pytest.mark.unit
def test_the_scaler_examples_lint_as_they_behave_on_kube_local():
    """deploy/sim/keda.yaml's two ScaledObjects, each with the Deployment it scales: the
    queue-only one (the incident, which FAILs scale_to_zero on real KEDA) trips RC010 and
    RC009; the in-flight-aware one is clean. deploy/vllm's HPA alternative is clean."""
    sim = [d for d in yaml.safe_load_all((ROOT / "deploy/sim/sim.yaml").read_text()) if d]
    keda = {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all((ROOT / "deploy/sim/keda.yaml").read_text())
        if d
    }
    assert rules_of([*sim, keda["rollcheck-sim"]]) == set()
    assert rules_of([*sim, keda["rollcheck-sim-queue-only"]]) == {"RC009", "RC010"}
    hpa = [
        d for d in yaml.safe_load_all((ROOT / "deploy/vllm/autoscaling/hpa.yaml").read_text()) if d
    ]
    without_keda = [d for d in docs() if d["kind"] != "ScaledObject"]
    assert rules_of([*without_keda, *hpa]) == set()


@pytest.mark.unit
def test_every_wrongly_typed_field_is_named_with_its_path_in_one_run():
    """Three mistakes, one run: each said with its path (one per run before, and
    `periodSeconds: ten` without where), and a preStop command written as one string
    said as the API would refuse it, not as a missing sleep (RC006)."""

    def wrong(o):
        c = container(o)
        c["readinessProbe"]["periodSeconds"] = "ten"
        c["lifecycle"]["preStop"]["exec"]["command"] = "sleep 15"
        o[0]["spec"]["replicas"] = "two"

    with pytest.raises(LintInputError) as info:
        findings_of(mutate(wrong))
    text = str(info.value)
    assert "\n" not in text
    for said in (
        "spec.replicas must be a whole number, not 'two'",
        "spec.template.spec.containers[0].readinessProbe.periodSeconds must be a number, not 'ten'",
        "spec.template.spec.containers[0].lifecycle.preStop.exec.command must be a list of "
        "strings, not str 'sleep 15': the API refuses it",
    ):
        assert said in text, text
    assert "RC006" not in text


@pytest.mark.unit
@pytest.mark.parametrize(
    "tolerations, trips",
    [
        ([], True),  # the admission's default: 300 s
        ([{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
           "effect": "NoExecute", "tolerationSeconds": 30}], True),  # not-ready left at 300
        ([{"operator": "Exists"}], True),  # tolerated for ever
        ([{"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}], False),
        ([{"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
          for k in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")], False),
    ],
)  # fmt: skip
def test_rc017_a_lost_nodes_pods_wait_the_default_300_s(tolerations, trips):
    objs = mutate(lambda o: o[0]["spec"]["template"]["spec"].update(tolerations=tolerations))
    assert ("RC017" in rules_of(objs)) is trips


@pytest.mark.unit
@pytest.mark.parametrize(
    "kv, limit, trips",
    [("40", "32Gi", True), ("40", "40Gi", True), ("40", "48Gi", False), ("4", "5G", False),
     ("4", "4000Mi", True), ("x", "1Gi", False)],
)  # fmt: skip
def test_rc019_the_memory_limit_holds_the_kv_cache(kv, limit, trips):
    objs = mutate(
        lambda o: container(o).update(
            env=[{"name": "VLLM_CPU_KVCACHE_SPACE", "value": kv}],
            resources={"limits": {"memory": limit, "nvidia.com/gpu": 1}},
        )
    )
    assert ("RC019" in rules_of(objs)) is trips
