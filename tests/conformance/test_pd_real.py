"""Prefill/decode disaggregation: the simulator's two roles held to real vLLM 0.32 (the
CPU build with the NixlConnector, its KV moved over UCX's TCP transport: NIXL runs on
this machine with no GPU). The test plays llm-d's routing sidecar: it asks the prefill
engine with `do_remote_decode` and one token, then the decode engine with the
`kv_transfer_params` the prefill answered. Both engines serve the model under one path,
as a rollout that keeps the model's name does; their weights are other seeds of one
shape. What real vLLM did is in docs/facts.md."""

from __future__ import annotations

import time

import httpx
import pytest

from harness.engines.lab import CHAT, MODEL, PD, events, start_engine
from harness.proc import lasting_port

pytestmark = pytest.mark.engine

PROMPTS = ["what does a rollout do to a stream?", "name three colours", "count to five"]
TIMEOUT_S = 180  # a first read took 30 s here (the NIXL agents' first exchange)
# how long a decode's request for a dead prefill's KV is watched: real vLLM either fails
# it at once or leaves its fetch in progress (docs/facts.md: 180 s and more in CI)
ORPHAN_WAIT_S = 60


def _choice(chunk) -> bool:
    return isinstance(chunk, dict) and bool(chunk.get("choices"))


def body(prompt: str, max_tokens: int, params: dict | None = None, stream=False) -> dict:
    payload = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,  # every answer max_tokens long: finish_reason length
        "stream": stream,
    }
    if params is not None:
        payload["kv_transfer_params"] = params
    return payload


def chat(engine, prompt: str, max_tokens: int, params: dict | None = None):
    return httpx.post(engine.url + CHAT, json=body(prompt, max_tokens, params), timeout=TIMEOUT_S)


def orphaned(decode, params: dict, wait_s: float) -> tuple[list, float, bool]:
    """The decode's streamed answer to a KV whose prefill is gone: its data events, the
    seconds it took, and whether it ended (False: wait_s passed without a byte)."""
    raw, t0 = b"", time.monotonic()
    payload = body(PROMPTS[0], 8, params, stream=True)
    try:
        timeout = httpx.Timeout(30, read=wait_s)
        with httpx.stream("POST", decode.url + CHAT, json=payload, timeout=timeout) as r:
            assert r.status_code == 200, r.read()
            for chunk in r.iter_raw():
                raw += chunk
        ended = True
    except httpx.ReadTimeout:
        ended = False
    return events(raw), time.monotonic() - t0, ended


def own(engine, prompt: str) -> str:
    r = chat(engine, prompt, 16)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def prefilled(prefill, prompt: str) -> dict:
    """The sidecar's prefill: one token, not streamed; the params naming the KV."""
    r = chat(prefill, prompt, 1, {"do_remote_decode": True, "do_remote_prefill": False})
    assert r.status_code == 200, r.text
    params = r.json().get("kv_transfer_params")
    assert params and params["do_remote_prefill"] is True, r.text
    return params


def disaggregated(prefill, decode, prompt: str) -> str:
    r = chat(decode, prompt, 16, prefilled(prefill, prompt))
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "length", r.text  # complete: nothing errored
    return choice["message"]["content"]


def engine(kind: str, folder, role: str, seed: int):
    """The engine alone (the simulator's decode with no sidecar: this test is its
    sidecar), asked directly for its own answers too."""
    pd = PD(role, lasting_port(), folder / f"{role}-{seed}")  # bound a minute later
    return start_engine(kind, folder, model=("tiny", seed), pd=pd, core=int(role == "decode"))


@pytest.fixture(scope="module", params=["vllm", "sim"])
def kind(request):
    return request.param


@pytest.mark.parametrize("prefill_seed", [0, 1], ids=["same-weights", "other-weights"])
def test_a_decode_continues_the_kv_it_is_given_whatever_weights_computed_it(
    kind, prefill_seed, tmp_path
):
    """The decode (seed 0) reads a KV the prefill computed. With the same weights the
    answer is the decode's own. With other weights of the same shape the handshake passes
    and the answer is neither engine's own: built from two models, and nothing errors.
    Then the prefill dies before a decode reads its KV: that request never answers. Real
    vLLM does one of two things (docs/facts.md): it fails at once, an in-stream "Internal
    server error" and [DONE] (kv_load_failure_policy fail), or its KV fetch stays in
    progress, not a byte more (UCX over TCP did not see the prefill go)."""
    prefill = engine(kind, tmp_path, "prefill", prefill_seed)
    decode = engine(kind, tmp_path, "decode", 0)
    try:
        for prompt in PROMPTS:
            mine, theirs = own(decode, prompt), own(prefill, prompt)
            got = disaggregated(prefill, decode, prompt)
            if prefill_seed == 0:
                assert mine == theirs == got, (prompt, mine, got)
            else:
                assert mine != theirs, prompt
                assert got not in (mine, theirs), (prompt, got, mine, theirs)
        if prefill_seed == 0:
            return
        params = prefilled(prefill, PROMPTS[0])
        prefill.stop()
        chunks, took, ended = orphaned(decode, params, wait_s=ORPHAN_WAIT_S)
        said = [c["choices"][0]["delta"].get("content") for c in chunks if _choice(c)]
        assert not any(said), chunks  # never an answer from a KV it could not read
        if ended:  # the prefill's loss seen: the request fails at once, in its stream
            errors = [c["error"]["message"] for c in chunks if isinstance(c, dict) and "error" in c]
            assert chunks[-1] == "[DONE]" and errors == ["Internal server error"], chunks
            assert took < 30, took
        else:  # its KV fetch stays "in progress": UCX over TCP did not see the peer go
            assert took >= ORPHAN_WAIT_S and "[DONE]" not in chunks, chunks
        print(f"a KV whose prefill is gone: {'failed' if ended else 'waiting'} after {took:.1f} s")
    finally:
        for e in (prefill, decode):
            if e.proc.poll() is None:
                e.stop()
