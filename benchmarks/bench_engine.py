"""Real vLLM (CPU build) start-up: one server, cold and warm compile cache, quiet or busy.

Run: .venv/bin/python -m benchmarks.bench_engine [--model slow] [--warm 2] [--busy 0]
Needs `bash scripts/build-vllm`. Cold: a fresh VLLM_CACHE_ROOT (torch.compile warms up);
warm: the same cache again; --busy N: N CPU busy loops beside it (a busy CI machine).
Prints seconds from exec to the first /health 200 (the port refuses connections until
then: no 503 phase), and the longest silence of its log meanwhile: the start-up waits
follow the log (harness/engines/startup.py) and call a start stuck after STALL_S of it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.bench_engine_sigterm import busy_loops
from harness.engines import startup, vllm
from harness.proc import free_port


def start_s(model: str, cache_root: str, log: Path) -> tuple[float, float]:
    """(seconds to /health 200, the longest gap between two writes to its log)."""
    port = free_port()
    cmd = vllm.serve_command("127.0.0.1", port, vllm.model_dir(model), "m")
    env = dict(os.environ, **vllm.serve_env(), VLLM_CACHE_ROOT=cache_root)
    t0 = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    size, grew_at, silence = 0, t0, 0.0
    try:
        while proc.poll() is None:
            now = time.monotonic()
            if startup.log_size(log) != size:
                size, grew_at = startup.log_size(log), now
            silence = max(silence, now - grew_at)
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    return now - t0, silence
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
    ap.add_argument("--busy", type=int, default=0, help="CPU busy loops beside the engine")
    args = ap.parse_args()
    vllm.check_memory(1)
    loops = busy_loops(args.busy)
    try:
        with tempfile.TemporaryDirectory(prefix="vllm-cache-") as cache:
            log = Path(cache) / "engine.log"
            took, silent = start_s(args.model, cache, log)
            print(f"cold compile cache: {took:6.1f} s  (longest log silence {silent:.1f} s)")
            for i in range(args.warm):
                took, silent = start_s(args.model, cache, log)
                print(
                    f"warm compile cache: {took:6.1f} s  (longest log silence {silent:.1f} s, "
                    f"run {i + 1})"
                )
    finally:
        for p in loops:
            p.kill()
            p.wait()
    print(f"busy loops: {args.busy}; {startup.machine_load()}")


if __name__ == "__main__":
    main()
