"""The simulator's prefill/decode roles (harness/sim/pd.py), as real processes on real
sockets: a decode engine behind its routing sidecar prefills each request at the prefill
Service, reads the KV from the prefill engine named in the answer, and decodes on from
it. A KV computed by other weights of the same shape passes the handshake (vLLM's NIXL
hash leaves the weights out) and gives an answer that is neither version's; the
revision-aware set-up refuses it; a prefill that is gone, refused or too slow is the
client's error, never a hang."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from harness.engines.lab import CHAT, gauges  # (running, waiting) by the engine's /metrics
from harness.sim.pd import mixed_weights

pytestmark = pytest.mark.process

PROMPT = [{"role": "user", "content": "what does a rollout do to a stream?"}]


def ask(url: str, stream: bool = True, timeout: float = 20.0) -> tuple[int, str, list]:
    """The status, the answer's text and its SSE data lines (the events after the text)."""
    body = {"model": "rollcheck-sim", "messages": PROMPT, "max_tokens": 24, "stream": stream}
    with httpx.Client(timeout=timeout) as c:
        r = c.post(url + "/v1/chat/completions", json=body)
        if not stream:
            if r.status_code != 200:
                return r.status_code, r.text, []
            return 200, r.json()["choices"][0]["message"]["content"], []
        data = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    pieces = []
    for d in data:
        if d == "[DONE]":
            continue
        obj = json.loads(d)
        for ch in obj.get("choices") or []:
            pieces.append((ch.get("delta") or {}).get("content") or "")
    return r.status_code, "".join(pieces), data


def test_a_decode_answers_as_its_version_from_a_kv_its_own_weights_computed(sim_factory):
    """Same weights on both roles: the answer is the version's own (as one engine's), and
    each KV is read once."""
    plain = sim_factory(model_version="v1")
    prefill = sim_factory(model_version="v1", pd_role="prefill")
    decode = sim_factory(model_version="v1", pd_role="decode", pd_prefill_url=prefill.url)
    status, want, _ = ask(plain.url)
    assert status == 200 and want
    for stream in (True, False):
        status, got, _ = ask(decode.url, stream=stream)
        assert (status, got) == (200, want)
    # the prefill held the KV and gave it once: a second read is refused
    body = {"model": "rollcheck-sim", "messages": PROMPT, "max_tokens": 1}
    body["kv_transfer_params"] = {"do_remote_decode": True}
    r = httpx.post(prefill.url + "/v1/chat/completions", json=body, timeout=10).json()
    params = r["kv_transfer_params"]
    assert params["do_remote_prefill"] is True and params["remote_port"] == prefill.settings.port
    kv = f"{prefill.url}/rollcheck/kv/{params['remote_request_id']}"
    assert httpx.get(kv, timeout=5).json()["weights"] == "v1"
    assert httpx.get(kv, timeout=5).status_code == 404


def test_a_kv_of_other_weights_gives_an_answer_of_neither_version(sim_factory):
    """A new prefill (v2's weights, same shape) and an old decode (v1): the handshake
    passes, and the answer matches neither v1's nor v2's: built from two models."""
    v1 = sim_factory(model_version="v1")
    v2 = sim_factory(model_version="v2")
    prefill_v2 = sim_factory(model_version="v2", pd_role="prefill")
    decode_v1 = sim_factory(model_version="v1", pd_role="decode", pd_prefill_url=prefill_v2.url)
    answers = {v: ask(s.url)[1] for v, s in (("v1", v1), ("v2", v2))}
    status, mixed, data = ask(decode_v1.url)
    assert status == 200 and data[-1] == "[DONE]"  # a complete stream, nothing errored
    assert mixed and mixed not in answers.values(), (mixed, answers)
    assert answers["v1"] != answers["v2"]
    assert mixed_weights("v2", "v1") != "v1" and mixed_weights("v1", "v1") == "v1"


@pytest.mark.parametrize("policy", ["fail", "recompute"])
def test_the_revision_aware_handshake_refuses_a_kv_of_other_weights(sim_factory, policy):
    """With the weights in the handshake the mixed KV is refused: the request fails as
    vLLM's kv_load_failure_policy fail fails it (an in-stream error, then [DONE]), or is
    prefilled again by the decode (recompute) and answered as its own version."""
    v1 = sim_factory(model_version="v1")
    prefill_v2 = sim_factory(model_version="v2", pd_role="prefill", pd_handshake_weights=True)
    decode_v1 = sim_factory(
        model_version="v1",
        pd_role="decode",
        pd_prefill_url=prefill_v2.url,
        pd_handshake_weights=True,
        pd_kv_load_failure=policy,
    )
    status, got, data = ask(decode_v1.url)
    assert status == 200
    if policy == "fail":
        errors = [json.loads(d)["error"] for d in data if d.startswith('{"error"')]
        assert [e["message"] for e in errors] == ["Internal server error"], data
        assert data[-1] == "[DONE]"
        assert ask(decode_v1.url, stream=False)[0] == 500
    else:
        assert got == ask(v1.url)[1]


def test_a_kv_layout_the_decode_does_not_share_fails_the_handshake(sim_factory):
    prefill = sim_factory(pd_role="prefill", pd_kv_layout="fp8")
    decode = sim_factory(pd_role="decode", pd_prefill_url=prefill.url)
    status, _, data = ask(decode.url)
    assert status == 200 and any("Internal server error" in d for d in data), data


def test_a_prefill_that_is_gone_or_refuses_is_the_clients_error(sim_factory):
    """The sidecar passes the prefill's status on with no body; a prefill nobody answers
    is a 502; both at once, not a hang."""
    decode = sim_factory(pd_role="decode", pd_prefill_url="http://127.0.0.1:9")
    t0 = time.monotonic()
    status, body, _ = ask(decode.url)
    assert (status, body) == (502, "") and time.monotonic() - t0 < 5
    refusing = sim_factory(pd_role="prefill", fault_http_error_rate=1.0, fault_http_status=503)
    decode = sim_factory(pd_role="decode", pd_prefill_url=refusing.url)
    assert ask(decode.url)[:2] == (503, "")


def test_with_the_fallback_a_failed_prefill_is_computed_on_the_decode(sim_factory):
    """pd_prefill_fallback: a prefill nobody answers, or one that refuses, is computed on
    the decode engine itself (as a P/D scheduler sends a request to its decode alone): the
    answer is the decode version's own; a hung one, once the sidecar's timeout ends it."""
    plain = sim_factory(model_version="v1")
    status, want, _ = ask(plain.url)
    refusing = sim_factory(pd_role="prefill", fault_http_error_rate=1.0, fault_http_status=503)
    hung = sim_factory(pd_role="prefill", ttft_s=3600)
    for url, timeout_s in (("http://127.0.0.1:9", 0.0), (refusing.url, 0.0), (hung.url, 1.0)):
        decode = sim_factory(
            model_version="v1",
            pd_role="decode",
            pd_prefill_url=url,
            pd_prefill_fallback=True,
            pd_prefill_timeout_s=timeout_s,
        )
        assert ask(decode.url)[:2] == (200, want), url


def test_a_hung_prefill_holds_the_request_unless_the_sidecar_has_a_timeout(sim_factory):
    """llm-d's sidecar sets no timeout on the prefill: a prefill that never answers holds
    the client's request for as long as the client waits. With pd_prefill_timeout_s the
    decode side answers 502 then."""
    hung = sim_factory(pd_role="prefill", ttft_s=3600)
    patient = sim_factory(pd_role="decode", pd_prefill_url=hung.url)
    with pytest.raises(httpx.ReadTimeout):
        ask(patient.url, timeout=2.0)
    bounded = sim_factory(pd_role="decode", pd_prefill_url=hung.url, pd_prefill_timeout_s=1.0)
    t0 = time.monotonic()
    assert ask(bounded.url, timeout=20.0)[0] == 502
    assert time.monotonic() - t0 < 10


def dead_prefills_kv(sim_factory) -> tuple[str, dict]:
    """A prefill engine's URL and a streamed request naming the KV it computed, the engine
    killed (SIGKILL) after answering and before any decode read that KV."""
    prefill = sim_factory(pd_role="prefill")
    body = {"model": "rollcheck-sim", "messages": PROMPT, "max_tokens": 1}
    body["kv_transfer_params"] = {"do_remote_decode": True}
    params = httpx.post(prefill.url + CHAT, json=body, timeout=10).json()
    prefill.proc.kill()
    prefill.proc.wait(10)
    ask_body = {"model": "rollcheck-sim", "messages": PROMPT, "max_tokens": 8, "stream": True}
    return prefill.url, ask_body | {"kv_transfer_params": params["kv_transfer_params"]}


def test_a_prefill_killed_after_its_prefill_fails_the_decodes_read(sim_factory):
    """The prefill answered, then died before the decode read its KV: the read fails and
    so does the request (kv_load_failure_policy fail), at once."""
    prefill_url, ask_body = dead_prefills_kv(sim_factory)
    decode = sim_factory(pd_role="decode", pd_prefill_url=prefill_url)
    r = httpx.post(decode.url + "/v1/chat/completions", json=ask_body, timeout=20)
    assert r.status_code == 200 and "Internal server error" in r.text and "[DONE]" in r.text


def test_a_read_from_a_gone_prefill_that_never_ends_holds_the_request(sim_factory):
    """pd_kv_read_lost hang: the decode's KV pull from a dead prefill stays in progress (as
    vLLM 0.32's did once in CI): headers, then not one byte, the request counted waiting
    (as vLLM counts one WAITING_FOR_REMOTE_KVS), until the client gives up; then it is
    gone from the engine's counts."""
    prefill_url, ask_body = dead_prefills_kv(sim_factory)
    decode = sim_factory(pd_role="decode", pd_prefill_url=prefill_url, pd_kv_read_lost="hang")
    got = b""
    timeout = httpx.Timeout(10, read=2)
    with httpx.stream("POST", decode.url + CHAT, json=ask_body, timeout=timeout) as r:
        assert r.status_code == 200
        deadline = time.monotonic() + 5
        while gauges(decode) != (0, 1) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gauges(decode) == (0, 1)  # the pull, in progress, while its client waits
        with pytest.raises(httpx.ReadTimeout):
            for chunk in r.iter_raw():
                got += chunk
    assert got == b"", got  # not even the role chunk: it comes with the first token
    deadline = time.monotonic() + 10
    while gauges(decode) != (0, 0) and time.monotonic() < deadline:  # the client gone
        time.sleep(0.1)
    assert gauges(decode) == (0, 0)
    with pytest.raises(httpx.ReadTimeout):  # unstreamed: no answer at all
        httpx.post(decode.url + CHAT, json=ask_body | {"stream": False}, timeout=timeout)


def test_the_simulator_imports_nothing_its_image_lacks():
    """The simulator's image holds only the packages `rollcheck sim` imports
    (harness/cluster/kubelocal/image.py SIM_PACKAGES): its P/D roles speak HTTP with the
    standard library, so a decode pod on kube-local starts."""
    import subprocess
    import sys

    from harness.cluster.kubelocal.image import SIM_PACKAGES

    code = (
        "import json, sys, harness.sim.server, harness.sim.pd\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    third_party = {"httpx", "httpcore", "requests", "aiohttp", "certifi"}
    assert not loaded & third_party, loaded & third_party
    assert "uvicorn" in SIM_PACKAGES
