"""Which container is the engine, which tool owns a Deployment, and which pod served a
stream when the gateway dialled a port that is not the engine's: the production shapes
a platform's pods come in (a sidecar listed first, a Service with a named targetPort)."""

from __future__ import annotations

import pytest

from harness.cluster.kube.owners import owner_of
from harness.events import Event
from harness.podspec import NoEngineContainer, engine_container
from harness.streams import GatewayLine, StreamRecord
from harness.timeline import TRACED_BY_ADDRESS, TRACED_BY_IP, correlate, host_of
from harness.verdict import RunData, attribution

pytestmark = pytest.mark.unit

SIM = {
    "name": "engine",
    "image": "localhost/rollcheck/sim:v1",
    "ports": [{"name": "http", "containerPort": 8000}],
}
VLLM_8200 = {
    "name": "vllm",
    "image": "vllm/vllm-openai:v0.32.0",
    "args": ["--port", "8200"],
    "ports": [{"name": "vllm", "containerPort": 8200}],
}
# Istio's sidecar as the injector writes it with holdApplicationUntilProxyStarts: first
ISTIO = {
    "name": "istio-proxy",
    "image": "docker.io/istio/proxyv2:1.28.0",
    "ports": [{"name": "http-envoy-prom", "containerPort": 15090}],
}
# llm-d's decode pods: the routing sidecar on 8000 in front of vLLM on 8200
LLMD_SIDECAR = {
    "name": "routing-proxy",
    "image": "ghcr.io/llm-d/llm-d-routing-sidecar:v0.3.0",
    "ports": [{"name": "proxy", "containerPort": 8000}],
}


def test_a_proxy_listed_first_is_not_the_engine():
    choice = engine_container({"containers": [ISTIO, SIM]}, services=[("svc", "http")])
    assert (choice.name, choice.index, choice.port) == ("engine", 1, 8000)
    assert choice.why == "Service svc targets its port http"


def test_the_services_numbered_target_port_names_the_container():
    plain = {"name": "app", "image": "registry/inference:7", "ports": [{"containerPort": 9000}]}
    choice = engine_container({"containers": [ISTIO, plain]}, services=[("svc", 9000)])
    assert (choice.name, choice.port) == ("app", 9000)


def test_a_known_engine_wins_over_a_sidecar_that_owns_the_services_port():
    choice = engine_container({"containers": [LLMD_SIDECAR, VLLM_8200]}, services=[("d", 8000)])
    assert (choice.name, choice.port) == ("vllm", 8200)
    assert "runs a known engine (vllm/vllm-openai:v0.32.0)" in choice.why
    assert "Service d targets routing-proxy's port 8000, a proxy in front of it" in choice.why


def test_by_name_and_a_name_that_is_not_there():
    choice = engine_container({"containers": [LLMD_SIDECAR, VLLM_8200]}, name="routing-proxy")
    assert (choice.name, choice.why) == ("routing-proxy", "named by kube.container")
    with pytest.raises(NoEngineContainer, match=r"kube.container 'engin' is not a container"):
        engine_container({"containers": [ISTIO, SIM]}, name="engin")


def test_without_a_service_the_known_engine_then_the_only_container():
    assert engine_container({"containers": [ISTIO, SIM]}).name == "engine"
    only = {"name": "x", "image": "mine:1"}
    assert engine_container({"containers": [only]}).why == "the pod's only container"


def test_two_unknown_containers_and_no_service_is_one_line_saying_what_to_set():
    a, b = {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}
    with pytest.raises(NoEngineContainer) as exc:
        engine_container({"containers": [a, b]})
    assert str(exc.value).endswith("set kube.container=NAME")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "meta, owner",
    [
        (
            {
                "ownerReferences": [
                    {
                        "kind": "LLMInferenceService",
                        "name": "llama",
                        "apiVersion": "serving.kserve.io/v1alpha1",
                        "controller": True,
                    }
                ]
            },  # fmt: skip
            "LLMInferenceService/llama (serving.kserve.io/v1alpha1)",
        ),
        (
            {"annotations": {"argocd.argoproj.io/tracking-id": "shop:apps/Deployment:ns/x"}},
            "Argo CD application shop:apps/Deployment:ns/x",
        ),
        ({"labels": {"kustomize.toolkit.fluxcd.io/name": "apps"}}, "Flux Kustomization apps"),
        ({"labels": {"serving.kserve.io/inferenceservice": "m"}}, "KServe InferenceService m"),
        ({"labels": {"app.kubernetes.io/managed-by": "llm-d-modelservice"}}, "llm-d-modelservice"),
        ({"labels": {"app.kubernetes.io/managed-by": "Helm"}}, None),
        ({"ownerReferences": [{"kind": "X", "name": "y", "controller": False}]}, None),
        ({}, None),
    ],
)
def test_who_owns_a_deployment(meta, owner):
    found = owner_of(meta)
    assert (found.name if found else None) == owner


@pytest.mark.parametrize(
    "address, host",
    [("10.0.0.7:8000", "10.0.0.7"), ("[fd00::7]:8000", "fd00::7"), ("10.0.0.7", "10.0.0.7")],
)
def test_host_of(address, host):
    assert host_of(address) == host


T = 1_000.0


def created(t, pod, address):
    return Event(T + t, "pod_created", pod, None, "v1", {"address": address})


def test_a_stream_through_a_sidecars_port_is_traced_by_the_pod_ip():
    """The watches name each pod by its engine's port; a gateway that dialled the pod's
    sidecar (or any other port) logs the same IP with another port."""
    events = [created(0, "a", "10.0.0.7:8000"), created(0, "b", "10.0.0.8:8000")]
    recs = [StreamRecord(f"r{i}", "complete", T + 5, 1.0) for i in range(3)]
    lines = {"r0": "10.0.0.7:8000", "r1": "10.0.0.8:15001", "r2": "10.0.0.9:8000"}
    access = [GatewayLine(rid, 200, a, "200", 10, 1.0, T + 6) for rid, a in lines.items()]
    correlate(recs, access, events)
    assert [(r.pod, r.traced_by) for r in recs] == [
        ("a", TRACED_BY_ADDRESS),
        ("b", TRACED_BY_IP),
        (None, None),
    ]
    att = attribution(RunData(recs, events, [], [], 3, 2, 0, 30.0, 5.0, gateway_logs="gw"))
    assert att["traced_by"] == {TRACED_BY_ADDRESS: 1, TRACED_BY_IP: 1}
    assert att["text"].startswith(
        "traced 2 of 3 streams to a pod (gateway log: 1, gateway log, by pod IP: 1); 1 untraced"
    )


def test_one_ip_held_by_several_pods_is_never_a_guess():
    """The local target's engines all listen on 127.0.0.1: only the exact address names
    one of them."""
    events = [created(0, "a", "127.0.0.1:9001"), created(0, "b", "127.0.0.1:9002")]
    rec = StreamRecord("r", "complete", T + 5, 1.0)
    correlate([rec], [GatewayLine("r", 200, "127.0.0.1:9003", "200", 1, 1.0, T + 6)], events)
    assert rec.pod is None


def test_a_stream_whose_request_id_the_gateway_replaced_joins_by_the_engines_id():
    """Envoy replaced x-request-id at the edge: the gateway logged its own id, and the
    engine, which adopts the id it receives, answered as chatcmpl-<that id>."""
    events = [created(0, "a", "10.0.0.7:8000")]
    ours = StreamRecord("ours-1", "complete", T + 5, 1.0, response_id="chatcmpl-gw-77")
    plain = StreamRecord("ours-2", "complete", T + 5, 1.0, response_id="chatcmpl-ours-2")
    lost = StreamRecord("ours-3", "complete", T + 5, 1.0, response_id="chatcmpl-engine-own")
    access = [
        GatewayLine("gw-77", 200, "10.0.0.7:8000", "200", 10, 1.0, T + 6),
        GatewayLine("ours-2", 200, "10.0.0.7:8000", "200", 10, 1.0, T + 6),
    ]
    assert correlate([ours, plain, lost], access, events) == 2
    assert (ours.pod, plain.pod, lost.pod) == ("a", "a", None)


# vLLM 0.32's lines as its logger prints them (request_logger.py:66, async_llm.py:783)
VLLM_RECEIVED = (
    "(APIServer pid=4242) INFO 12-04 17:02:11 [request_logger.py:66] Received request "
    "chatcmpl-{rid}: params: SamplingParams(n=1, presence_penalty=0.0, temperature=1.0, "
    "max_tokens=64, seed=None), lora_request: None."
)
VLLM_ABORTED = (
    "(APIServer pid=4242) INFO 12-04 17:02:12 [async_llm.py:783] Request chatcmpl-{rid} aborted."
)


def test_a_stream_no_gateway_logged_is_traced_by_the_engine_log_that_received_it(tmp_path):
    from harness.engine_logs import received_ids, served_by
    from harness.timeline import TRACED_BY_ENGINE_LOG

    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(
        VLLM_RECEIVED.format(rid="r1") + "\n" + VLLM_ABORTED.format(rid="r1") + "\n"
        + VLLM_RECEIVED.format(rid="both") + "\n" + "x" * 200_000 + "\n"
    )  # fmt: skip
    b.write_text(VLLM_RECEIVED.format(rid="gw-9") + "\n" + VLLM_RECEIVED.format(rid="both") + "\n")
    assert received_ids([VLLM_RECEIVED.format(rid="r1"), VLLM_ABORTED.format(rid="r1")]) == ["r1"]
    served = served_by({"pod-a": a, "pod-b": b, "gone": tmp_path / "none.log"})
    assert served == {"r1": "pod-a", "gw-9": "pod-b"}  # an id in two logs names neither
    events = [created(0, "pod-a", "10.0.0.7:8000"), created(0, "pod-b", "10.0.0.8:8000")]
    events[1] = Event(T, "pod_created", "pod-b", None, "v2", {"address": "10.0.0.8:8000"})
    r1 = StreamRecord("r1", "complete", T + 5, 1.0)
    r2 = StreamRecord("ours-2", "complete", T + 5, 1.0, response_id="chatcmpl-gw-9")
    r3 = StreamRecord("both", "complete", T + 5, 1.0)
    correlate([r1, r2, r3], [], events, served)
    assert [(r.pod, r.version, r.traced_by) for r in (r1, r2, r3)] == [
        ("pod-a", "v1", TRACED_BY_ENGINE_LOG),
        ("pod-b", "v2", TRACED_BY_ENGINE_LOG),
        (None, None, None),
    ]
    att = attribution(RunData([r1, r2, r3], events, [], [], 3, 2, 0, 30.0, 5.0, engine_logs=2))
    assert att["traced_by"] == {TRACED_BY_ENGINE_LOG: 2}
    assert att["why_untraced"] == {"no gateway logs, and no engine log line with its request id": 1}
