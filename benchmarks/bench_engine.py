"""Real vLLM (CPU build) start-up: one server, cold and warm compile cache.

Run: .venv/bin/python -m benchmarks.bench_engine [--model slow] [--warm 2]
Needs `bash scripts/build-vllm`. Cold: a fresh VLLM_CACHE_ROOT (torch.compile warms up);
warm: the same cache again. Prints seconds from exec to the first /health 200; the port
refuses connections until then (no 503 phase).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import tempfile
import time

import httpx

from harness.engines import vllm
from harness.proc import free_port


def start_s(model: str, cache_root: str) -> float:
    port = free_port()
    cmd = vllm.serve_command("127.0.0.1", port, vllm.model_dir(model), "m")
    env = dict(os.environ, **vllm.serve_env(), VLLM_CACHE_ROOT=cache_root)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        while proc.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"vllm exited with {proc.returncode} while starting")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="slow", choices=("tiny", "slow"))
    ap.add_argument("--warm", type=int, default=2, help="warm starts after the cold one")
    args = ap.parse_args()
    vllm.check_memory(1)
    with tempfile.TemporaryDirectory(prefix="vllm-cache-") as cache:
        print(f"cold compile cache: {start_s(args.model, cache):6.1f} s")
        for i in range(args.warm):
            print(f"warm compile cache: {start_s(args.model, cache):6.1f} s  (run {i + 1})")


if __name__ == "__main__":
    main()
