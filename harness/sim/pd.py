"""Prefill/decode disaggregation as vLLM's NIXL connector and llm-d's routing sidecar
serve it (docs/facts.md, "Prefill/decode disaggregation").

The prefill role: a request whose `kv_transfer_params` asks `do_remote_decode` is
prefilled and answered at once (the sidecar asks one token, not streamed) with the
params a decode reads its KV by, as vLLM 0.32's NIXL pull scheduler returns them
(`do_remote_prefill`, `remote_engine_id`, `remote_request_id`, `remote_host`,
`remote_port`, ...). The KV is held for the decode to read once, until its lease ends.

The decode role: llm-d's routing sidecar and the decode engine behind it. The sidecar
sends the request to the prefill Service (`pd_prefill_url`) with `do_remote_decode`,
`stream: false` and `max_tokens: 1`; a prefill that fails gives the client its status
with no body (502 where none came); a prefill that hangs holds the request, as the
sidecar sets no timeout (`pd_prefill_timeout_s` sets one). The engine then reads the KV
from the prefill engine the params name (the handshake: the engines' compatibility hash,
of the engine, the model's name and shape and the KV's layout, and not of the weights,
vllm-project/vllm #55776), and decodes on from it. A KV that cannot be read fails the
request, as vLLM's `kv_load_failure_policy: fail` does (an in-stream "Internal server
error", then [DONE]), or is recomputed locally (`recompute`).

The simulator's text depends on the weights that computed the KV and on the decode's
own: a KV of other weights gives an answer that is neither version's, as a real decode
continuing another model's KV would. `pd_handshake_weights` adds the weights to the
handshake (the fix the issue above asks for), so such a KV is refused instead.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import os
import time
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

KV_PATH = "/rollcheck/kv/"  # the side channel, on the engine's own port
MAX_HELD = 4096  # KVs held for decodes at once; the oldest go first beyond it
MAX_ANSWER = 1 << 20  # the most of a prefill's or a KV read's answer read
HANDSHAKE_S = 5.0  # NIXL's handshake waits 5 s for the remote's metadata


def mixed_weights(kv_weights: str, own: str) -> str:
    """The weights an answer comes from when one engine's KV is decoded by another's."""
    return own if kv_weights == own else f"{kv_weights}+kv>{own}"


class PrefillFailed(Exception):
    """The prefill the sidecar asked for gave no KV: the client gets `status`."""

    def __init__(self, status: int, why: str):
        super().__init__(why)
        self.status, self.why = status, why


@dataclass
class Loaded:
    """What the decode engine's KV read gave: the KV's weights, or why none."""

    weights: str | None
    remote: str  # the prefill engine's host:port
    why: str = ""
    lost: bool = False  # the prefill engine was not there to read from (gone, silent)


@dataclass
class _Held:
    weights: str
    compat: str
    tokens: int
    expires: float


class PD:
    """One engine's side of P/D: the KVs it holds (prefill) or reads (decode)."""

    def __init__(self, settings, weights: str):
        self.s = settings
        self.weights = weights
        self.engine_id = str(uuid.uuid4())
        self.held: collections.OrderedDict[str, _Held] = collections.OrderedDict()

    # --- the handshake ---------------------------------------------------------------
    def compat(self) -> str:
        """The compatibility hash the handshake compares (vLLM's factors: the engine's
        version, the model's name and shape, the KV's dtype and layout; the weights only
        with pd_handshake_weights)."""
        factors = {"engine": "rollcheck-sim", "model": self.s.model, "kv": self.s.pd_kv_layout}
        if self.s.pd_handshake_weights:
            factors["weights"] = self.weights
        return hashlib.sha256(json.dumps(factors, sort_keys=True).encode()).hexdigest()

    # --- the prefill role ------------------------------------------------------------
    def hold(self, request_id: str, prompt_tokens: int) -> dict:
        """Hold the request's KV for a decode to read; the params that name it."""
        now = time.monotonic()
        while self.held and (
            len(self.held) >= MAX_HELD or next(iter(self.held.values())).expires < now
        ):
            self.held.popitem(last=False)
        rid = f"{request_id}-{uuid.uuid4().hex[:8]}"
        self.held[rid] = _Held(
            self.weights, self.compat(), prompt_tokens, now + self.s.pd_kv_lease_s
        )
        host = os.environ.get("VLLM_NIXL_SIDE_CHANNEL_HOST") or _reachable(self.s.host)
        return {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": [[1 + i for i in range(max(1, prompt_tokens // 16))]],
            "remote_engine_id": self.engine_id,
            "remote_request_id": rid,
            "remote_host": host,
            "remote_port": self.s.port,
            "tp_size": 1,
            "remote_num_tokens": prompt_tokens,
        }

    def read(self, remote_request_id: str) -> tuple[int, dict]:
        """The side channel: the handshake's hash and the KV (its weights), read once."""
        kv = self.held.pop(remote_request_id, None)
        if kv is None or kv.expires < time.monotonic():
            return 404, {"error": f"no KV held for {remote_request_id}"}
        return 200, {
            "compatibility_hash": kv.compat,
            "engine_id": self.engine_id,
            "weights": kv.weights,
            "num_tokens": kv.tokens,
        }

    # --- the decode role ---------------------------------------------------------------
    async def prefill(self, path: str, data: dict, headers: dict) -> dict:
        """The sidecar's prefill request to the prefill Service: its kv_transfer_params."""
        body = dict(data)
        body["kv_transfer_params"] = {
            "do_remote_decode": True,
            "do_remote_prefill": False,
            "remote_engine_id": None,
            "remote_block_ids": None,
            "remote_host": None,
            "remote_port": None,
        }
        body["stream"] = False
        body.pop("stream_options", None)
        body["max_tokens"] = 1
        body.pop("max_completion_tokens", None)
        send = {k: v for k, v in headers.items() if k in ("authorization", "x-request-id")}
        url = self.s.pd_prefill_url.rstrip("/") + path
        try:
            status, answer = await _http(
                "POST", url, json.dumps(body).encode(), send, self.s.pd_prefill_timeout_s or None
            )
        except (OSError, TimeoutError, ValueError) as exc:
            raise PrefillFailed(502, f"prefill at {url}: {type(exc).__name__} {exc}") from None
        if not 200 <= status < 300:
            raise PrefillFailed(status, f"prefill at {url}: HTTP {status}")
        try:
            params = json.loads(answer).get("kv_transfer_params")
        except (ValueError, AttributeError):
            params = None
        if not isinstance(params, dict):
            raise PrefillFailed(502, f"prefill at {url}: no kv_transfer_params in its answer")
        return params

    async def load(self, params: dict) -> Loaded:
        """The decode engine's KV read from the prefill engine the params name."""
        remote = f"{params.get('remote_host')}:{params.get('remote_port')}"
        url = f"http://{remote}{KV_PATH}{params.get('remote_request_id')}"
        try:
            status, answer = await _http("GET", url, b"", {}, HANDSHAKE_S)
            got = json.loads(answer) if status == 200 else {}
        except (OSError, TimeoutError, ValueError) as exc:
            why = f"KV read from {remote}: {type(exc).__name__} {exc}"
            return Loaded(None, remote, why, lost=not isinstance(exc, ValueError))
        if status != 200:
            return Loaded(None, remote, f"KV read from {remote}: HTTP {status}")
        if got.get("compatibility_hash") != self.compat():
            return Loaded(None, remote, f"handshake with {remote}: compatibility hash mismatch")
        return Loaded(str(got.get("weights")), remote)


async def _http(
    method: str, url: str, body: bytes, headers: dict, timeout_s: float | None
) -> tuple[int, bytes]:
    """One HTTP/1.1 exchange (Connection: close), its status and body (at most
    MAX_ANSWER): the simulator's image holds no HTTP client library."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not an http URL: {url}")
    target = parts.path + (f"?{parts.query}" if parts.query else "")

    async def exchange() -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
        try:
            head = [f"{method} {target or '/'} HTTP/1.1", f"Host: {parts.netloc}"]
            head += ["Connection: close", f"Content-Length: {len(body)}"]
            head += ["Content-Type: application/json"] if body else []
            head += [f"{k}: {v}" for k, v in headers.items()]
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
            await writer.drain()
            raw = await reader.read(MAX_ANSWER)
            while len(raw) < MAX_ANSWER:
                more = await reader.read(MAX_ANSWER - len(raw))
                if not more:
                    break
                raw += more
        finally:
            writer.close()
        return _parse(raw)

    return await asyncio.wait_for(exchange(), timeout_s)


def _parse(raw: bytes) -> tuple[int, bytes]:
    """An HTTP/1.1 answer's status and body (Content-Length, chunked, or to the close)."""
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if not sep:
        raise ValueError("the answer ended before its headers")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    fields = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    if fields.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size.split(b";")[0] or b"0", 16)
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2 :]
        return status, out
    if "content-length" in fields:
        return status, rest[: int(fields["content-length"])]
    return status, rest


def _reachable(host: str) -> str:
    """The address a peer reaches a listener on (vLLM's side channel default: localhost)."""
    return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
