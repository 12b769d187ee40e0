"""The user's HTTPRoute as weighted_canary and shadow change it, against kube-local's real
API server with the Gateway API's standard CRDs (their schema and CEL rules validate
every patch). No Gateway API implementation runs here (docs/facts.md says why), so the
route's status is written by the test as a gateway writes it."""

from __future__ import annotations

import copy

import pytest

from harness.cluster.kube.route import GROUP, PLURAL, VERSION, Route
from harness.cluster.target import TargetError

pytestmark = pytest.mark.kube


def http_route(name: str) -> dict:
    header = {
        "type": "RequestHeaderModifier",
        "requestHeaderModifier": {"set": [{"name": "x-team", "value": "serving"}]},
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": {
            "parentRefs": [{"name": "inference-gateway"}],
            "rules": [
                {  # another model's rule, never touched
                    "matches": [{"path": {"type": "PathPrefix", "value": "/other"}}],
                    "backendRefs": [{"name": "other", "port": 8000}],
                },
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                    "filters": [header],
                    "backendRefs": [
                        {"name": "vllm-stable", "port": 8000, "weight": 100},
                        {"name": "vllm-canary", "port": 8000, "weight": 0},
                    ],
                },
            ],
        },
    }


def create(custom, namespace: str, name: str) -> dict:
    return custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, http_route(name)
    )


def test_weights_and_mirror_change_only_the_named_rule_and_are_put_back(gateway_api, namespace):
    custom = gateway_api
    created = create(custom, namespace, "chat")
    route = Route(custom, namespace, "chat", 1, "vllm-stable", "vllm-canary")
    record = route.snapshot()

    gen = route.set_weight(10)
    spec = route.read()["spec"]
    assert [r["weight"] for r in spec["rules"][1]["backendRefs"]] == [90, 10]
    assert spec["rules"][0] == created["spec"]["rules"][0]  # the other rule as it was
    assert gen > created["metadata"]["generation"]

    route.set_mirror(100, record["filters"])  # the API server's CEL rules accept it
    filters = route.read()["spec"]["rules"][1]["filters"]
    assert filters[0] == record["filters"][0]  # the rule's own filter kept, first
    # as the API server stores it: the CRD's defaults filled in (group "", kind Service)
    assert filters[1] == {
        "type": "RequestMirror",
        "requestMirror": {
            "backendRef": {"group": "", "kind": "Service", "name": "vllm-canary", "port": 8000},
            "percent": 100,
        },
    }
    route.set_mirror(0, record["filters"])
    assert route.read()["spec"]["rules"][1]["filters"] == record["filters"]

    assert route.put_back(record) > gen
    assert route.read()["spec"] == created["spec"]  # exactly as it was
    assert route.put_back(record) is None  # nothing left to put back


def test_a_route_edited_meanwhile_is_refused_not_overwritten(gateway_api, namespace):
    custom = gateway_api
    create(custom, namespace, "edited")
    route = Route(custom, namespace, "edited", 1, "vllm-stable", "vllm-canary")
    route.snapshot()
    # someone renames the candidate's backend in the rule (a JSON patch of theirs)
    ops = [{"op": "replace", "path": "/spec/rules/1/backendRefs/1/name", "value": "vllm-b"}]
    custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        "edited",
        ops,
        _content_type="application/json-patch+json",
    )
    with pytest.raises(TargetError, match="names the Service vllm-canary 0 times"):
        route.set_weight(50)
    weights = [r["weight"] for r in route.read()["spec"]["rules"][1]["backendRefs"]]
    assert weights == [100, 0]  # untouched


@pytest.mark.parametrize(
    "name, rule, stable, said",
    [
        ("nowhere", 0, "vllm-stable", "does not exist"),
        ("chat2", 5, "vllm-stable", "has 2 rules: kube.route_rule 5 is not one"),
        ("chat3", 0, "vllm-stable", "names the Service vllm-stable 0 times"),
    ],
)
def test_a_route_that_does_not_fit_is_one_line(gateway_api, namespace, name, rule, stable, said):
    if name != "nowhere":
        create(gateway_api, namespace, name)
    with pytest.raises(TargetError, match=said):
        Route(gateway_api, namespace, name, rule, stable, "vllm-canary").snapshot()


def test_the_gateway_says_when_it_applied_a_change(gateway_api, namespace):
    custom = gateway_api
    create(custom, namespace, "status")
    route = Route(custom, namespace, "status", 1, "vllm-stable", "vllm-canary")
    gen = route.set_weight(50)
    assert route.accepted(gen) is None  # no gateway has written a status
    status = {
        "parents": [
            {
                "parentRef": {"name": "inference-gateway"},
                "controllerName": "example.com/gateway",
                "conditions": [
                    {
                        "type": "Accepted",
                        "status": "True",
                        "reason": "Accepted",
                        "message": "",
                        "observedGeneration": gen - 1,
                        "lastTransitionTime": "2026-12-06T00:00:00Z",
                    }
                ],
            }
        ]
    }
    body = copy.deepcopy(route.read()) | {"status": status}
    custom.replace_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "status", body
    )
    assert route.accepted(gen) is False  # accepted, but an older generation
    body = route.read()
    body["status"]["parents"][0]["conditions"][0]["observedGeneration"] = gen
    custom.replace_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "status", body
    )
    assert route.accepted(gen) is True
