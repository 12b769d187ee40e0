"""How soon real vLLM hands a second request to its engine while a first one streams.

Run: .venv/bin/python -m benchmarks.bench_engine_admission [--tries 8] [--busy 0,2]
     [--kind vllm]
Needs `bash scripts/build-vllm`. One engine (one sequence slot, one queue place); each try
streams one long answer, sends a second request once three tokens have come, and records
when the second one got its headers, when the engine's `vllm:num_requests_waiting` gauge
first counted it, and the longest `/metrics` answer meanwhile. `--busy 0,2` runs every
condition: 0 and then 2 CPU busy loops beside the engine (a busy CI machine). The
conformance suite's running answer must outlast the slowest of these (docs/facts.md).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.bench_engine_sigterm import busy_loops
from harness.engines import lab


def one_try(engine: lab.Engine, timeout_s: float = 30) -> dict:
    lab.wait_idle(engine)
    running = lab.Reader(engine.url, lab.body(lab.LONG), read_timeout_s=60)
    running.wait_tokens(3)
    t0 = time.monotonic()
    queued = lab.Reader(engine.url, lab.body(3), read_timeout_s=60)
    counted, slowest = None, 0.0
    while running.is_alive() and time.monotonic() - t0 < timeout_s:
        asked = time.monotonic()
        waiting = lab.gauges(engine)[1]
        slowest = max(slowest, time.monotonic() - asked)
        if waiting >= 1:
            counted = time.monotonic() - t0
            break
        time.sleep(0.1)
    headers = queued.headers_at - t0 if queued.headers_at else None
    running.cancel()
    queued.join(60)
    return {"headers_s": headers, "counted_s": counted, "slowest_metrics_s": slowest}


def spread(values: list) -> str:
    known = [v for v in values if v is not None]
    missed = len(values) - len(known)
    if not known:
        return f"never ({missed} tries)"
    text = f"median {statistics.median(known):.2f} s, {min(known):.2f}-{max(known):.2f} s"
    return text + (f", not seen in {missed}" if missed else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=8)
    ap.add_argument("--busy", default="0,2", help="busy loops beside the engine, per condition")
    ap.add_argument("--kind", default="vllm", choices=("vllm", "sim"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="admission-") as tmp:
        for busy in [int(b) for b in args.busy.split(",")]:
            loops = busy_loops(busy)
            try:
                engine = lab.start_engine(
                    args.kind, Path(tmp), max_num_seqs=1, max_num_queued_reqs=2
                )
                try:
                    tries = [one_try(engine) for _ in range(args.tries)]
                finally:
                    engine.stop()
            finally:
                for p in loops:
                    p.kill()
                    p.wait()
            print(f"{args.kind}, {busy} busy loops, {args.tries} tries:")
            print(f"  second request's headers: {spread([t['headers_s'] for t in tries])}")
            print(f"  counted waiting:          {spread([t['counted_s'] for t in tries])}")
            print(f"  slowest /metrics:         {spread([t['slowest_metrics_s'] for t in tries])}")


if __name__ == "__main__":
    main()
