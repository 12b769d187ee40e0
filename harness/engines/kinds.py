"""The engine kinds rollcheck runs (`engine.kind`): the simulator, and real vLLM's CPU
build on a locally built model. What the config, the local target, the plugin and the
scenarios need to know of an engine is asked of its kind here; nothing outside
harness/engines tests which engine runs (tests/test_layers.py). A third engine is a
third EngineKind in KINDS (docs/architecture.md).

Light to import: the config loads it; what a kind runs is imported when it runs.
"""

from __future__ import annotations

from harness.engines.startup import STALL_S


class EngineKind:
    """One engine kind. `engine`: the config's engine section (harness.config.schema
    EngineSettings), or the simulator's own settings where a pod runs the simulator."""

    name = ""
    # a real engine: it compiles at start-up and starts slowly (a few at a time, as many
    # as the machine has free cores), and on the local target the SLOs it is judged by
    # are measured on this machine first (slo.calibrate: auto)
    real = False
    config_defaults: dict = {}  # laid over the config file, under every --set
    # answers from its weights, not its version: a candidate of the same weights (a canary
    # in mode same) answers as the baseline only once given the baseline's weights
    answers_from_weights = False
    # its start-up time on the local target is the config's (engine.startup_s), so a
    # start-up check knows it before it is observed
    startup_is_configured = False
    # the local target can run it as a prefill/decode pair (decode pods need a routing
    # sidecar before a real engine)
    runs_pd_locally = False

    def command(self, engine, core: int = 0) -> tuple[list[str], dict | None]:
        """A local pod's command, and its environment over the harness's (None: the
        harness's own)."""
        raise NotImplementedError

    def preflight(self, engine, servers: int) -> None:
        """Before the local target starts `servers` engines at once: what they need is
        there (memory, the model), or one clear error (RollcheckError)."""

    def start_gate(self):
        """The gate local starts pass through (harness.engines.startup.StartGate), or
        None: every start at once."""
        return None

    def adapter_path(self, engine, path: str) -> str:
        """The LoRA adapter a pod loads for `path` (adapter.path/<version>)."""
        return path

    def tokens_per_s(self, engine) -> float | None:
        """Each stream's pace where the config says it (load.workers: auto sizes the
        load by it), else None."""
        return None


class Simulator(EngineKind):
    """rollcheck's engine simulator (harness.sim), each pod a `rollcheck sim` process."""

    name = "sim"
    answers_from_weights = True
    startup_is_configured = True
    runs_pd_locally = True

    def command(self, engine, core: int = 0) -> tuple[list[str], dict | None]:
        from harness.proc import sim_command

        return sim_command(engine), None

    def tokens_per_s(self, engine) -> float | None:
        return 1.0 / engine.itl_s if engine.itl_s else None


# engine.kind: vllm brings the real engine's time scale on 2 CPU cores (start-up 35-75 s,
# about 60 ms a token with 4 streams); laid over the config file, under every --set.
VLLM_DEFAULTS: dict = {
    # the drain's timeout covers the longest answer (200 tokens, about 140 events) at the
    # slowest decode measured in a drain: 170 ms an event on the drained engine while its
    # replacement starts beside it (26 s; CI cut two answers at a 20 s timeout)
    "engine": {"shutdown_timeout_s": 45, "max_num_seqs": 4},
    "pod": {
        "prestop_s": 1.0,
        "termination_grace_s": 60,  # > preStop + shutdown_timeout_s
        "memory_limit_mb": None,  # real vLLM on CPU holds about 4.5 GB
        # the kubelet's bound on a start: as generous as the harness's own ceiling, so a
        # slow start on a busy machine is not restarted (a stuck one stops logging)
        "startup_probe": {"period_s": 1.0, "failure_threshold": 1200},
        "readiness_probe": {"period_s": 0.5, "failure_threshold": 1},
        "liveness_probe": {"period_s": 5.0, "failure_threshold": 6},
    },
    "load": {
        "users": 4,
        # answers outlast the preStop, so streams are in flight at SIGTERM (3-12 s)
        "max_tokens": [{"tokens": 60, "weight": 0.6}, {"tokens": 200, "weight": 0.4}],
        "stop_timeout_s": 30,
    },
    "slo": {"ttft_s": 5.0, "stall_timeout_s": 20},
    # settle: every replica of a real engine started (about 60 s each on a quiet machine,
    # 90 s beside two busy loops, 140-200 s on a cold compile cache: the waits follow each
    # engine's log, and call a start stuck after 240 s of silence, harness/engines/startup.py)
    "scenario": {
        "recovery_s": 300,
        "steady_state_s": 120,
        "cool_down_s": 3,
        "settle_s": 1200,
        "startup_stall_s": STALL_S,
        "warm_requests": 3,
    },
    "pdb": {"min_available": 1},  # 2 replicas on 2 cores: one may go at a time
    # a candidate's engine starts beside the loaded baseline (60-120 s); at about one
    # answer a second through 4 streams, a step of 10% would need minutes for 10 streams.
    # Greedy decoding on the CPU build is not batch-invariant: the same weights asked
    # idle (the candidate) and beside 4 streams (the baseline) gave 6 and 4 of 8 identical
    # answers, every other one identical for its first 9 to 38 tokens (docs/facts.md);
    # other weights differ from the first token on 8 of 8
    "canary": {"ready_s": 600, "min_agreement": 0.6, "agree_after_tokens": 8},
    "weighted_canary": {
        "min_agreement": 0.6,
        "agree_after_tokens": 8,
        "ready_s": 600,
        "steps": [50, 100],
        "step_s": 20,
        "step_max_s": 300,
        "min_samples": 10,
    },
    # the load holds the baseline at its batch limit (4 users, max_num_seqs 4), closed
    # loop; a mirror of every request feeds the candidate the same rate open loop, on the
    # same two cores, so any shortfall queues: 100% mirrored gave the candidate a TTFT
    # median of 1.5 s and 5-7.5 s against the baseline's 0.17 s (docs/facts.md). Half the
    # requests leave it the headroom a shadow on a machine of its own has
    "shadow": {
        "percent": 50,
        "min_agreement": 0.6,
        "agree_after_tokens": 8,
        "ready_s": 600,
        "window_s": 60,
        "idle_s": 300,
        "min_samples": 10,
    },
    "adapter": {"step_s": 15},
}


class Vllm(EngineKind):
    """Real vLLM, the CPU build scripts/build-vllm installs (harness.engines.vllm), on a
    model built from engine.real_model and engine.seed."""

    name = "vllm"
    real = True
    config_defaults = VLLM_DEFAULTS

    def command(self, engine, core: int = 0) -> tuple[list[str], dict | None]:
        from harness.engines import vllm

        lora = getattr(engine, "runtime_lora", False)
        command = vllm.serve_command(
            engine.host,
            engine.port,
            vllm.model_dir(engine.real_model, engine.seed),
            engine.model,
            shutdown_timeout_s=engine.shutdown_timeout_s,
            max_num_seqs=engine.max_num_seqs,
            extra=vllm.LORA_FLAGS if lora else (),
        )
        return command, vllm.serve_env(core) | (vllm.LORA_ENV if lora else {})

    def preflight(self, engine, servers: int) -> None:
        from harness.engines import vllm

        vllm.check_memory(servers)
        vllm.model_dir(engine.real_model, engine.seed)  # built once

    def start_gate(self):
        from harness.engines.startup import StartGate

        return StartGate.for_this_machine()

    def adapter_path(self, engine, path: str) -> str:
        """The adapter built for the local model under that path (one per path, built on
        first use): adapter.path/<version> names weights of its own."""
        import zlib

        from harness.engines import vllm

        model = vllm.model_dir(engine.real_model, engine.seed)
        return str(vllm.adapter_dir(model, 1 + zlib.crc32(path.encode()) % 9999))


KINDS: dict[str, EngineKind] = {k.name: k for k in (Simulator(), Vllm())}


def kind_of(engine) -> EngineKind:
    """The kind of an engine section; the simulator's own settings (no kind) are the
    simulator."""
    return KINDS[getattr(engine, "kind", "sim")]
