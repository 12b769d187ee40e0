"""LoRA adapters loaded at run time: the simulator held to real vLLM (the CPU build with
--enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, rank-8 adapters the project
builds for its local model: harness/engines/build_model.py). The same requests against
both, the same assertions; what real vLLM does is in docs/facts.md."""

from __future__ import annotations

import httpx
import pytest

from harness.engines import vllm
from harness.engines.lab import CHAT, MODEL, Reader, body, events, start_engine

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module", params=["vllm", "sim"])
def lora_engine(request, tmp_path_factory):
    e = start_engine(request.param, tmp_path_factory.mktemp("lora"), lora=True)
    yield e
    e.stop()


def adapter_paths(engine) -> tuple[str, str]:
    """Two adapters for the engine's model: their weights differ (other seeds)."""
    if engine.kind != "vllm":
        return "/adapters/one", "/adapters/two"
    model = vllm.model_dir("slow", 0)
    return str(vllm.adapter_dir(model, 1)), str(vllm.adapter_dir(model, 2))


def lora(engine, verb: str, **fields) -> httpx.Response:
    return httpx.post(f"{engine.url}/v1/{verb}_lora_adapter", json=fields, timeout=120)


def answer(engine, model: str) -> tuple[int, dict]:
    payload = body(max_tokens=12, stream=False, model=model, temperature=0, seed=1)
    r = httpx.post(engine.url + CHAT, json=payload, timeout=120)
    return r.status_code, r.json()


def text(reply: dict) -> str:
    return reply["choices"][0]["message"]["content"]


def test_an_adapter_loads_answers_under_its_name_and_unloads_as_vllm_does(lora_engine):
    """A loaded adapter answers with its own weights under its name (the answer's model),
    is listed, is refused a second load; its unload removes the name only: a stream in
    flight on it goes on to its end, and a request naming it then gets the 404 "does not
    exist"; a second unload is a 404 "cannot be found"."""
    e = lora_engine
    one, _ = adapter_paths(e)
    r = lora(e, "load", lora_name="conf-a", lora_path=one)
    assert (r.status_code, r.text) == (200, "Success: LoRA adapter 'conf-a' added successfully.")
    status, base = answer(e, MODEL)
    status_a, with_a = answer(e, "conf-a")
    assert (status, status_a) == (200, 200) and with_a["model"] == "conf-a", with_a
    assert text(with_a) != text(base)  # the adapter's weights change the answer
    listed = {m["id"] for m in httpx.get(e.url + "/v1/models", timeout=30).json()["data"]}
    assert {MODEL, "conf-a"} <= listed, listed
    again = lora(e, "load", lora_name="conf-a", lora_path=one)
    assert again.status_code == 400 and "has already been loaded" in again.text, again.text

    reader = Reader(e.url, body(max_tokens=200, model="conf-a"))
    reader.wait_tokens(3)
    gone = lora(e, "unload", lora_name="conf-a")
    assert (gone.status_code, gone.text) == (
        200,
        "Success: LoRA adapter 'conf-a' removed successfully.",
    )
    reader.join(120)
    chunks = events(reader.raw)
    assert chunks[-1] == "[DONE]", reader.state()
    assert chunks[-2]["choices"][0]["finish_reason"] == "length", reader.state()
    status, after = answer(e, "conf-a")
    assert status == 404, after
    assert after["error"]["message"].startswith("The model `conf-a` does not exist"), after
    assert lora(e, "unload", lora_name="conf-a").status_code == 404


def test_a_reload_in_place_from_new_weights_answers_with_them(lora_engine):
    """The same name reloaded in place (load_inplace) from another adapter's path keeps
    the adapter's id; the answers come from the new weights, as a new name loaded from
    that path gives them. (docs/facts.md says what real vLLM did.)"""
    e = lora_engine
    one, two = adapter_paths(e)
    assert lora(e, "load", lora_name="conf-b", lora_path=one).status_code == 200
    old = text(answer(e, "conf-b")[1])
    r = lora(e, "load", lora_name="conf-b", lora_path=two, load_inplace=True)
    assert r.status_code == 200, r.text
    reloaded = text(answer(e, "conf-b")[1])
    assert lora(e, "load", lora_name="conf-c", lora_path=two).status_code == 200
    fresh = text(answer(e, "conf-c")[1])
    assert reloaded == fresh != old, (old, reloaded, fresh)
