"""Simulator settings: one dataclass, mirrored by `rollcheck sim` options and config keys."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

from harness.urls import url_problem

# How streams still open end when the engine stops serving them (at SIGTERM with
# --shutdown-timeout 0, or at the drain deadline). Measured on vLLM 0.32 (docs/facts.md,
# benchmarks/bench_engine_sigterm.py): a race between `error_event` (the EngineCore error
# in the stream, then [DONE]; exit about 0.35 s later), `hang` (no more bytes, sockets
# left open, no exit until the clients leave or SIGKILL) and `abort` (a final chunk with
# finish_reason abort, then [DONE]); in all three the listener closes at once. `race`
# picks one per process, seeded, weighted as measured (sim/app.py RACE_WEIGHTS).
# `legacy` closes without finish or [DONE] (before v0.18).
SHUTDOWN_MODES = ("race", "error_event", "hang", "abort", "legacy")
DRAIN_NEW_REQUESTS = ("500", "abort", "503")
FAULT_KINDS = ("http_error", "error_event", "stall", "crash")
PD_ROLES = ("", "prefill", "decode")
KV_LOAD_FAILURE = ("fail", "recompute")  # vLLM's kv_transfer_config.kv_load_failure_policy
# a KV read from a prefill engine that is gone: the transport notices (an error at once) or
# the pull stays in progress (vLLM 0.32 has no decode-side timeout on it: docs/facts.md)
KV_READ_LOST = ("fail", "hang")


@dataclass
class SimSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "rollcheck-sim"
    model_version: str = "v1"
    weights: str = ""
    # as vLLM's --api-key (or VLLM_API_KEY): /v1/* without "Authorization: Bearer <key>" get 401
    api_key: str = ""
    degraded: bool = False
    seed: int = 0
    # timing
    ttft_s: float = 0.05
    itl_s: float = 0.02
    itl_jitter_s: float = 0.0
    prefill_s_per_1k_tokens: float = 0.02
    max_num_seqs: int = 256
    min_answer_tokens: int = 8
    max_answer_tokens: int = 64
    # lifecycle
    startup_s: float = 0.0
    startup_health_503: bool = False
    shutdown_timeout_s: float = 0.0
    shutdown_mode: str = "race"
    drain_new_requests: str = "500"
    drain_health: int = 200
    shutdown_teardown_s: float = 5.5
    # admission and limits
    max_num_queued_reqs: int = 0
    max_model_len: int = 0
    enable_request_id_headers: bool = False
    enable_log_requests: bool = False
    sse_keep_alive_interval_s: float = 0.0
    send_timestamps: bool = False
    # per-process faults: a rate in [0, 1] for each kind, after N tokens
    fault_http_error_rate: float = 0.0
    fault_http_status: int = 503
    fault_error_event_rate: float = 0.0
    fault_stall_rate: float = 0.0
    fault_crash_rate: float = 0.0
    fault_after_tokens: int = 3
    memory_mb_per_1k_tokens: float = 0.0
    # LoRA adapters loaded and unloaded at run time (vLLM's --enable-lora with
    # VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)
    runtime_lora: bool = False
    stale_lora_reload: bool = False
    # prefill/decode disaggregation (harness/sim/pd.py): the engine's role, and the decode
    # side's routing sidecar (llm-d's) and KV read (vLLM's NIXL connector)
    pd_role: str = ""
    pd_prefill_url: str = ""
    pd_kv_layout: str = "bfloat16"
    pd_handshake_weights: bool = False
    pd_kv_load_failure: str = "fail"
    pd_kv_read_lost: str = "fail"
    pd_prefill_timeout_s: float = 0.0
    pd_prefill_fallback: bool = False
    pd_kv_lease_s: float = 480.0

    def validate(self) -> None:
        if self.shutdown_mode not in SHUTDOWN_MODES:
            raise ValueError(f"shutdown_mode must be one of {', '.join(SHUTDOWN_MODES)}")
        if self.drain_new_requests not in DRAIN_NEW_REQUESTS:
            raise ValueError(f"drain_new_requests must be one of {', '.join(DRAIN_NEW_REQUESTS)}")
        if self.max_num_queued_reqs < 0 or self.max_model_len < 0:
            raise ValueError("max_num_queued_reqs and max_model_len must be >= 0 (0: no limit)")
        if self.drain_health not in (200, 503):
            raise ValueError("drain_health must be 200 or 503")
        if self.max_num_seqs < 1:
            raise ValueError("max_num_seqs must be at least 1")
        if not 1 <= self.port <= 65535:  # (a larger one was taken modulo 65536, unsaid)
            raise ValueError(f"port must be between 1 and 65535, not {self.port}")
        if not 0 <= self.min_answer_tokens <= self.max_answer_tokens:
            raise ValueError("need 0 <= min_answer_tokens <= max_answer_tokens")
        if self.memory_mb_per_1k_tokens < 0:
            raise ValueError("memory_mb_per_1k_tokens must not be negative")
        if self.pd_role not in PD_ROLES:
            raise ValueError(f"pd_role must be one of {', '.join(map(repr, PD_ROLES))}")
        if self.pd_prefill_url and (problem := url_problem(self.pd_prefill_url)):
            raise ValueError(f"pd_prefill_url: {problem}")
        if self.pd_prefill_url and self.pd_role != "decode":
            raise ValueError("pd_prefill_url is the decode role's (pd_role decode)")
        if self.pd_kv_load_failure not in KV_LOAD_FAILURE:
            raise ValueError(f"pd_kv_load_failure must be one of {', '.join(KV_LOAD_FAILURE)}")
        if self.pd_kv_read_lost not in KV_READ_LOST:
            raise ValueError(f"pd_kv_read_lost must be one of {', '.join(KV_READ_LOST)}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith(("_s", "_rate")) and value < 0:
                raise ValueError(f"{f.name} must not be negative")
            if f.name.endswith("_rate") and value > 1:
                raise ValueError(f"{f.name} is a rate between 0 and 1")


_HELP = {
    "host": "address to listen on",
    "port": "port to listen on",
    "model": "served model name (requests naming another model get 404)",
    "model_version": "version string shown in system_fingerprint, to tell rollouts apart",
    "api_key": "require this bearer token on /v1/* (as vLLM's --api-key; default: "
    "$VLLM_API_KEY if set)",
    "weights": "the weights answers come from (default: model_version); the same weights "
    "under another model_version answer the same, as an engine upgrade should",
    "degraded": "a bad model at normal speed with healthy probes: degenerate, repetitive text",
    "seed": "base seed of the deterministic text",
    "ttft_s": "time to first token for an admitted request",
    "itl_s": "time between tokens",
    "itl_jitter_s": "uniform jitter added to each inter-token gap",
    "prefill_s_per_1k_tokens": "extra prefill time per 1000 prompt tokens",
    "max_num_seqs": "sequences decoded at once; excess requests queue",
    "min_answer_tokens": "shortest natural answer (finish_reason stop)",
    "max_answer_tokens": "longest natural answer",
    "startup_s": "weight-loading time; the port refuses connections meanwhile",
    "startup_health_503": "during startup, listen and answer /health 503 instead of refusing",
    "shutdown_timeout_s": "SIGTERM drain: 0 = abort in-flight at once (vLLM default), "
    "N = keep serving in-flight streams up to N s",
    "shutdown_mode": "how streams still open end at SIGTERM with --shutdown-timeout 0 or at "
    "the drain deadline: race (vLLM 0.32 as measured: error_event, hang or abort, seeded per "
    "process), error_event (EngineCore error event + [DONE], exit 0.35 s later), hang (no "
    "more bytes, no exit until the clients leave or SIGKILL), abort (finish_reason abort + "
    "[DONE]), legacy (close without finish or [DONE], pre-0.18)",
    "drain_new_requests": "new requests while draining: 500 (vLLM 0.32: HTTP 500 'cannot "
    "schedule new futures after shutdown', connection closed), abort (200 then "
    "finish_reason abort) or 503",
    "shutdown_teardown_s": "after the last stream of a drain, time until the process exits "
    "(vLLM 0.32: about 5.5 s); new requests still get the drain answer meanwhile",
    "max_num_queued_reqs": "admission limit: requests waiting beyond it get 503 (0: unbounded, "
    "vLLM's default)",
    "max_model_len": "max_tokens above it is a 400 with param max_tokens (0: no limit)",
    "drain_health": "/health status while draining: 200 (vLLM) or 503",
    "enable_request_id_headers": "echo X-Request-Id in the response headers",
    "enable_log_requests": "log 'Received request chatcmpl-<id>: params: ...' as each "
    "request is accepted, as vLLM's --enable-log-requests",
    "sse_keep_alive_interval_s": "send ': keep-alive' comments every N s (0 = off)",
    "send_timestamps": "add the send time to each chunk (rollcheck_sent_at), for skew benchmarks",
    "memory_mb_per_1k_tokens": "host memory each request holds while in flight, per 1000 "
    "tokens of its context (prompt and answer), as a KV cache offloaded to host memory: "
    "with a memory limit, one long context or enough load crosses it (oom_kill)",
    "runtime_lora": "serve /v1/load_lora_adapter and /v1/unload_lora_adapter, and requests "
    "naming a loaded adapter, as vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING",
    "stale_lora_reload": "an adapter reloaded in place keeps answering with its old weights "
    "(an engine that caches adapters by id)",
    "pd_role": "prefill/decode disaggregation: prefill (hold each request's KV for a decode "
    "to read) or decode (prefill each request at --pd-prefill-url first, then decode from "
    "the KV read there, as llm-d's routing sidecar and vLLM's NIXL connector do)",
    "pd_prefill_url": "decode: the prefill Service's URL its routing sidecar sends each "
    "prefill to (unset: the decode engine alone, which reads the KV a request's "
    "kv_transfer_params name and prefills the others itself)",
    "pd_kv_layout": "the KV's dtype and layout in the P/D handshake: engines that differ "
    "refuse each other's KV (the weights are not compared)",
    "pd_handshake_weights": "decode: the handshake compares the weights too, so a KV other "
    "weights computed is refused (a revision-aware set-up)",
    "pd_kv_load_failure": "decode: a KV that cannot be read or is refused fails the request "
    "(fail: an in-stream error, vLLM's default) or is computed again here (recompute)",
    "pd_kv_read_lost": "decode: a KV read from a prefill engine that is gone fails at once "
    "(fail: the transport notices, then as pd_kv_load_failure says) or never ends (hang: "
    "the pull stays in progress, no byte after the headers until the client leaves, as "
    "vLLM 0.32's NIXL pull did once over TCP)",
    "pd_prefill_timeout_s": "decode: how long the sidecar waits for a prefill (0: for ever, "
    "as llm-d's sidecar)",
    "pd_prefill_fallback": "decode: a prefill that fails (no answer, an error status, the "
    "sidecar's timeout) is computed here instead, as a P/D scheduler sends a request to its "
    "decode alone when no prefill pod can take it (llm-d); off: the client gets the "
    "prefill's status, as llm-d's sidecar passes it on",
    "pd_kv_lease_s": "prefill: how long a KV is held for its decode "
    "(VLLM_NIXL_ABORT_REQUEST_TIMEOUT)",
    "fault_http_error_rate": "share of requests answered with an HTTP error before streaming",
    "fault_http_status": "status of injected HTTP errors (429, 500, 503, ...)",
    "fault_error_event_rate": "share of streams that get an error event after N tokens",
    "fault_stall_rate": "share of streams that stop sending after N tokens",
    "fault_crash_rate": "share of streams whose process exits after N tokens",
    "fault_after_tokens": "N for the mid-stream faults",
}


# Options named after vLLM's own flags rather than the setting.
_FLAG_NAMES = {
    "shutdown_timeout_s": "--shutdown-timeout",
    "sse_keep_alive_interval_s": "--sse-keep-alive-interval",
}


def flag_name(name: str) -> str:
    return _FLAG_NAMES.get(name, "--" + name.replace("_", "-"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one `--kebab-case` option per setting (bools become flags)."""
    defaults = SimSettings()
    for f in fields(SimSettings):
        flag = flag_name(f.name)
        default = getattr(defaults, f.name)
        help_text = f"{_HELP[f.name]} (default: {default})"
        if isinstance(default, bool):
            parser.add_argument(flag, dest=f.name, action="store_true", help=_HELP[f.name])
        else:
            parser.add_argument(
                flag, dest=f.name, type=type(default), default=default, help=help_text
            )


def from_namespace(ns: argparse.Namespace) -> SimSettings:
    return SimSettings(**{f.name: getattr(ns, f.name) for f in fields(SimSettings)})


def to_args(settings: SimSettings) -> list[str]:
    """The command-line form of settings, for starting a simulator process."""
    defaults = SimSettings()
    args: list[str] = []
    for f in fields(SimSettings):
        value = getattr(settings, f.name)
        if value == getattr(defaults, f.name):
            continue
        flag = flag_name(f.name)
        if isinstance(value, bool):
            args.append(flag)
        else:
            args += [flag, str(value)]
    return args
