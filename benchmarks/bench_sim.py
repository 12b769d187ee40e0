"""Simulator throughput: concurrent 50 tok/s streams vs the simulator's send-schedule lag.

Run: .venv/bin/python -m benchmarks.bench_sim [--levels 100,200,300,400] [--repeat 3]
Prints events/s, lag p50/p99 (the simulator's own, from /sim/stats) and its CPU%.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx

from benchmarks.rawload import run_streams
from harness.proc import free_port, running_sim
from harness.sim.settings import SimSettings


def loop_factory():
    # The client shares the machine's two cores with the simulator: keep it lean.
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def measure(url: str, host: str, port: int, streams: int, seconds: float, itl_s: float) -> dict:
    """One run: the simulator's own figures over `seconds` while every stream is mid-answer."""
    ramp_s = 1.0
    # Streams outlive the window, so it sees the full load (streams / itl_s events/s).
    tokens = int((ramp_s + 0.5 + seconds + 1.0) / itl_s)
    window = {}

    def ramped():  # in a thread: the client's loop keeps reading meanwhile
        httpx.delete(url + "/sim/stats")
        time.sleep(seconds)
        window.update(httpx.get(url + "/sim/stats").json())

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(run_streams(host, port, streams, tokens, ramp_s, ramped))
    return {
        "streams": streams,
        "events_per_s": window["events_sent"] / window["wall_s"],
        "lag_p50_ms": (window["lag_p50_s"] or 0) * 1000,
        "lag_p99_ms": (window["lag_p99_s"] or 0) * 1000,
        "cpu_pct": 100 * window["cpu_s"] / window["wall_s"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", default="100,200,300,400")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--repeat", type=int, default=3, help="runs per level (the VM is noisy)")
    ap.add_argument("--itl-s", type=float, default=0.02)
    ap.add_argument("--lag-goal-ms", type=float, default=5.0)
    args = ap.parse_args()
    settings = SimSettings(port=free_port(), ttft_s=0.01, itl_s=args.itl_s, max_num_seqs=4096)
    with running_sim(settings) as url:
        held = None
        print(f"{'streams':>8} {'events/s':>10} {'lag p50 ms':>11} {'lag p99 ms':>11} {'CPU%':>6}")
        for level in (int(x) for x in args.levels.split(",")):
            runs = []
            for _ in range(args.repeat):
                r = measure(url, "127.0.0.1", settings.port, level, args.seconds, args.itl_s)
                runs.append(r)
                print(
                    f"{r['streams']:>8} {r['events_per_s']:>10.0f} {r['lag_p50_ms']:>11.2f} "
                    f"{r['lag_p99_ms']:>11.2f} {r['cpu_pct']:>6.0f}"
                )
            ok = sum(r["lag_p99_ms"] < args.lag_goal_ms for r in runs)
            print(
                f"{level:>8} streams: p99 under {args.lag_goal_ms} ms in {ok} of {len(runs)} runs"
            )
            if ok == len(runs):
                held = level
        if held:
            print(f"largest load under {args.lag_goal_ms} ms p99 lag in every run: {held} streams")
        else:
            print(f"no level held p99 lag under {args.lag_goal_ms} ms in every run")


if __name__ == "__main__":
    main()
