"""How real vLLM ends the streams in flight at SIGTERM (default --shutdown-timeout 0).

Run: .venv/bin/python -m benchmarks.bench_engine_sigterm [--runs 8] [--busy 0,2] [--kind vllm]
     [--shutdown-timeout 3]  (a drain whose deadline the answer outlives)
Needs `bash scripts/build-vllm`. Each run starts one engine (one sequence slot, one queue
place), streams one long answer and queues a second request behind it, sends SIGTERM to
the main process (as the kubelet does) and records how each stream ended (error_event,
hang, abort + [DONE], or anything else), how soon the listener closed and the process
exited, the fingerprint, and what the stream judge called each stream. `--busy 0,2` runs
every condition: 0 and then 2 CPU busy loops beside the engine (a busy CI machine).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from harness.engines import lab
from harness.proc import refuses_connections

BUSY_LOOP = "while True: pass"


def busy_loops(n: int) -> list[subprocess.Popen]:
    return [
        subprocess.Popen([sys.executable, "-c", BUSY_LOOP], start_new_session=True)
        for _ in range(n)
    ]


def one_sigterm(kind: str, log_dir: Path, model: str, shutdown_timeout_s: int = 0) -> dict:
    engine = lab.start_engine(
        kind,
        log_dir,
        model=(model, 0),
        max_num_seqs=1,
        max_num_queued_reqs=2,
        shutdown_timeout_s=shutdown_timeout_s,
    )
    try:
        running, queued = lab.one_queued(engine, lab.LONG, 5, read_timeout_s=10, include_usage=True)
        t0 = time.monotonic()
        engine.signal(signal.SIGTERM)
        closed_s = None
        while time.monotonic() - t0 < shutdown_timeout_s + 5:
            if refuses_connections(engine.port):
                closed_s = round(time.monotonic() - t0, 3)
                break
            time.sleep(0.02)
        running.join(40)
        queued.join(40)
        left_s = max(0.1, shutdown_timeout_s + 30 - (time.monotonic() - t0))
        exited_s = time.monotonic() - t0 if engine.exited_within(left_s) else None
        out = {"start_s": round(engine.start_s, 1), "listener_closed_s": closed_s}
        out["exited_s"] = None if exited_s is None else round(exited_s, 2)
        for name, r in (("running", running), ("queued", queued)):
            rec = r.judged()
            out[name] = {
                "ending": str(lab.sigterm_ending(r.raw, r.end)),
                "ended_s": None if r.ended_at is None else round(r.ended_at - t0, 2),
                "judge": str(rec.outcome),
                "fingerprint": lab.fingerprint(r),
                "usage": b'"usage"' in r.raw,
                "tail": r.raw[-300:].decode(errors="replace"),
            }
        return out
    finally:
        engine.stop()


def summarize(label: str, runs: list[dict]) -> None:
    print(f"\n== {label}: {len(runs)} SIGTERMs")
    for name in ("running", "queued"):
        endings = Counter(r[name]["ending"].split(" (")[0] for r in runs)
        judged = Counter(r[name]["judge"] for r in runs)
        print(f"  {name:8} endings: {dict(endings)}  judged: {dict(judged)}")
    pairs = Counter((r["running"]["ending"], r["queued"]["ending"]) for r in runs)
    print(f"  pairs (running, queued): {dict(pairs)}")
    for ending in sorted({r["running"]["ending"] for r in runs}):
        these = [r for r in runs if r["running"]["ending"] == ending]
        closed = [r["listener_closed_s"] for r in these]
        exited = [r["exited_s"] for r in these]
        print(f"  {ending}: listener closed after {closed} s; exited after {exited} s")
    prints = {r[n]["fingerprint"] for r in runs for n in ("running", "queued")} - {None}
    print(f"  fingerprints: {sorted(prints)}; start-up: {[r['start_s'] for r in runs]} s")
    for r in runs:
        for n in ("running", "queued"):
            if r[n]["ending"].startswith("other"):
                print(f"  OTHER {n}: {r[n]['ending']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=8, help="SIGTERMs per condition")
    ap.add_argument("--busy", default="0,2", help="CPU busy loops beside the engine, per condition")
    ap.add_argument("--kind", default="vllm", choices=("vllm", "sim"))
    ap.add_argument("--model", default="slow", choices=("tiny", "slow"))
    ap.add_argument(
        "--shutdown-timeout",
        type=int,
        default=0,
        help="the engine's --shutdown-timeout: 0 (vLLM's default) or N, a drain whose "
        "deadline the long answer outlives",
    )
    ap.add_argument("--json", type=Path, help="also write every run here")
    args = ap.parse_args()
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="sigterm-") as tmp:
        for busy in [int(b) for b in args.busy.split(",")]:
            label = f"{args.kind}, --shutdown-timeout {args.shutdown_timeout}, {busy} busy loops"
            loops = busy_loops(busy)
            try:
                runs = []
                for i in range(args.runs):
                    r = one_sigterm(args.kind, Path(tmp), args.model, args.shutdown_timeout)
                    runs.append(r)
                    print(
                        f"{label} run {i + 1}: running {r['running']['ending'][:60]}, "
                        f"queued {r['queued']['ending'][:60]}, listener closed "
                        f"{r['listener_closed_s']}, exited {r['exited_s']}",
                        flush=True,
                    )
            finally:
                for p in loops:
                    p.kill()
                    p.wait()
            results[label] = runs
    for label, runs in results.items():
        summarize(label, runs)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
