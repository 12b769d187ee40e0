"""adapter_rollout's parts that need no engine: the load's model mix, the config, and the
two checks judged from literal answers, records and events (the scenario runs against
the simulator's adapters in tests/e2e/test_detection.py)."""

from __future__ import annotations

import random

import pytest

from harness import checks as C
from harness.canary import Answer
from harness.config import ConfigError
from harness.config.load import ModelShare, draw_model
from harness.config.schema import load_config
from tests.test_verdict import T, data, ev, rec, status

pytestmark = pytest.mark.unit


def test_a_model_mix_sends_each_share_to_its_model_and_the_rest_to_the_base():
    rng = random.Random(1)
    mix = [ModelShare("support-v1", 0.3), ModelShare("support-v2", 0.2)]
    drawn = [draw_model(mix, "base", rng.random()) for _ in range(20000)]
    shares = {m: drawn.count(m) / len(drawn) for m in ("support-v1", "support-v2", "base")}
    assert abs(shares["support-v1"] - 0.3) < 0.02 and abs(shares["support-v2"] - 0.2) < 0.02
    assert abs(shares["base"] - 0.5) < 0.02
    assert draw_model([], None, 0.5) is None  # no mix: the load's own model (or none)


@pytest.mark.parametrize(
    "sets, words",
    [
        (
            ["load.models=[{model: a, weight: 0.7}, {model: b, weight: 0.4}]"],
            "add up to more than 1",
        ),
        (["adapter.steps=[50, 10]"], "steps must rise"),
        (["adapter.share=0"], "share must be above 0"),
        (["adapter.to_version=v1"], "two different versions"),
    ],
)
def test_bad_adapter_settings_are_one_line_errors(sets, words):
    with pytest.raises(ConfigError) as info:
        load_config(None, sets)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_versioned_names_and_one_name_reloaded_in_place():
    cfg = load_config(None, [])
    assert cfg.adapter.names() == ("support-v1", "support-v2")
    assert cfg.adapter.path_of("v2") == "/adapters/support/v2"
    one = load_config(None, ["adapter.versioned=false"]).adapter
    assert one.names() == ("support", "support")


def answers(*texts: str, outcome: str = "complete") -> list[Answer]:
    return [Answer(f"p{i}", outcome, [t]) for i, t in enumerate(texts)]


def judged_answers(before: dict, after: dict, versioned: bool = True):
    result = {"old": "support-v1", "new": "support-v2", "versioned": versioned}
    return C.adapter_answers(result | {"before": before, "after": after})(data([]))


def test_each_version_answers_alike_everywhere_and_the_new_one_not_as_the_old():
    old = {"a": answers("x", "y"), "b": answers("x", "y")}
    new = {"a": answers("x2", "y2"), "b": answers("x2", "y2")}
    r = judged_answers(old, new)
    assert status(r) == "pass" and "alike on 2 replicas" in r.observed
    # the new version answers as the old: under a name of its own, its path holds the old
    # weights; reloaded in place under the one name, the engine kept them
    r = judged_answers(old, {"a": answers("x", "y"), "b": answers("x", "y")})
    assert status(r) == "fail" and "exactly as support-v1 did" in r.observed
    assert "adapter.path" in r.hint
    one = {"old": "support", "new": "support", "versioned": False, "before": old}
    r = C.adapter_answers(one | {"after": {"a": answers("x", "y")}})(data([]))
    assert status(r) == "fail" and "exactly before its reload" in r.observed
    assert "reloaded in place" in r.observed and "a name of its own" in r.hint
    # one replica with other weights under the new name
    r = judged_answers(old, {"a": answers("x2", "y2"), "b": answers("x", "y")})
    assert status(r) == "fail" and "b answer support-v2 otherwise than a" in r.observed
    # a replica that did not answer (the adapter not loaded there: 404)
    r = judged_answers(old, {"a": answers("x2", "y2"), "b": answers("", "", outcome="http_error")})
    assert status(r) == "fail" and "b did not answer 2 golden prompts" in r.observed


def test_the_old_version_unloaded_with_requests_still_naming_it_fails():
    unload = ev(T + 5, "action", "p1", action="adapter_unload", adapter="support-v1")
    tagged = {"tags": {"model": "support-v1"}}
    finished = rec("f", sent=T + 4, dur=2.0, pod="p1", **tagged)  # in flight at the unload
    r = C.adapter_unload_clean(data([finished, rec("b", sent=T + 6)], [unload]))
    assert status(r) == "pass" and "1 in flight at it finished" in r.observed
    late = rec("late", "http_error", sent=T + 6, dur=0.01, status=404, **tagged)
    r = C.adapter_unload_clean(data([finished, late], [unload]))
    assert status(r) == "fail" and "1 requests named support-v1 after its unload" in r.observed
    assert "1 got 404" in r.observed and r.requests == ["late"] and "100%" in r.hint
    cut = rec("cut", "reset", sent=T + 4, dur=2.0, **tagged)
    r = C.adapter_unload_clean(data([cut], [unload]))
    assert status(r) == "fail" and "did not finish (reset)" in r.observed
    assert status(C.adapter_unload_clean(data([finished], []))) == "skipped"  # in place
    # no request named the old version: no evidence either way
    empty = C.adapter_unload_clean(data([rec("b", sent=T + 6)], [unload]))
    assert status(empty) == "inconclusive" and "no request of the load named" in empty.reason


def test_a_cluster_engine_loads_adapters_only_with_vllms_runtime_flags():
    """On a cluster adapter_rollout reads the engine container before acting: vLLM needs
    --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (a value from a ConfigMap is
    taken as set), the simulator --runtime-lora; anything else is SKIPPED naming what is
    missing."""
    from kubernetes.client import V1Container, V1EnvVar, V1EnvVarSource

    from harness.cluster.kube.target import runtime_lora_blocker

    allow = V1EnvVar(name="VLLM_ALLOW_RUNTIME_LORA_UPDATING", value="True")
    from_map = V1EnvVar(name="VLLM_ALLOW_RUNTIME_LORA_UPDATING", value_from=V1EnvVarSource())
    vllm = ["vllm", "serve", "/models/m"]
    ok = [
        V1Container(name="engine", command=vllm, args=["--enable-lora"], env=[allow]),
        V1Container(
            name="engine", command=["sh", "-c", "vllm serve m --enable-lora"], env=[from_map]
        ),  # fmt: skip
        V1Container(name="engine", args=["sim", "--runtime-lora"]),
    ]
    for c in ok:
        assert runtime_lora_blocker(c, "vllm") is None, c
    said = runtime_lora_blocker(V1Container(name="engine", command=vllm, env=[allow]), "vllm")
    assert said.startswith("the engine container engine of Deployment vllm does not load")
    assert "lacks --enable-lora (" in said
    off = V1EnvVar(name="VLLM_ALLOW_RUNTIME_LORA_UPDATING", value="False")
    said = runtime_lora_blocker(V1Container(name="e", args=["--enable-lora"], env=[off]), "d")
    assert "lacks VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (" in said
    assert "--enable-lora and VLLM" in runtime_lora_blocker(V1Container(name="e"), "d")
