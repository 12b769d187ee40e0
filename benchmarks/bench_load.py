"""Load generator capacity: streams and token events/s per Locust worker, against a
minimal asyncio httpx client doing the same work, with the client timing skew.

Run: .venv/bin/python -m benchmarks.bench_load [--levels 50,100,200] [--seconds 6]
Skew = arrival time - the simulator's send stamp per chunk (--send-timestamps).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import httpx

from harness import client_delay
from harness.config.load import LoadSettings, Share
from harness.load import LoadRun
from harness.proc import free_port, running_sim
from harness.sim.settings import SimSettings
from harness.streams import Thresholds
from harness.streams.summary import percentile


def locust_run(url: str, users: int, workers: int, seconds: float, tokens: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        s = LoadSettings(
            users=users,
            spawn_rate=1000,
            workers=workers,
            ignore_eos=True,
            max_tokens=[Share(tokens)],
            stop_timeout_s=0.5,
        )
        run = LoadRun(url, d, s, Thresholds(30))
        run.start()
        run.wait_until_in_flight(int(users * 0.9), timeout_s=60)
        t0 = time.time()
        time.sleep(seconds)
        result = run.stop()
        windows = [w for w in client_delay.read(Path(d)) if t0 <= w["t"] < t0 + seconds]
    done = [r for r in result.records if r.sent_at >= t0 - 1 and r.outcome == "complete"]
    out = _figures(result.records, done, seconds, t0)
    delay = client_delay.summarize(windows) or {}
    out["delay_p99_ms"] = 1000 * delay.get("p99_s", 0.0)
    out["cpu_max"] = delay.get("cpu_max") or 0.0
    return out


def _figures(records, done, seconds, t0) -> dict:
    events = sum(r.events for r in records if r.sent_at + r.duration_s >= t0)
    window = [r for r in records if r.skew_p99_s is not None]
    return {
        "events_per_s": events / (seconds + 1.0),
        "skew_p50_ms": 1000 * (percentile([r.skew_p50_s for r in window], 50) or 0),
        "skew_p99_ms": 1000 * (percentile([r.skew_p99_s for r in window], 99) or 0),
        "complete": len(done),
    }


async def _reference(url: str, users: int, seconds: float, tokens: int) -> dict:
    """The smallest correct streaming client: asyncio + httpx, one task per user."""
    stop = time.monotonic() + seconds
    skews: list[float] = []
    events = 0
    t0 = time.time()
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=users + 10)) as c:

        async def user(i: int) -> None:
            nonlocal events
            while time.monotonic() < stop:
                body = {
                    "messages": [{"role": "user", "content": f"ref {i}"}],
                    "stream": True,
                    "max_tokens": tokens,
                    "ignore_eos": True,
                }
                async with c.stream("POST", url + "/v1/chat/completions", json=body) as r:
                    buf = b""
                    async for chunk in r.aiter_raw():
                        now = time.time()
                        buf += chunk
                        *lines, buf = buf.split(b"\n\n")
                        for line in lines:
                            events += 1
                            if line.startswith(b"data: {"):
                                sent = json.loads(line[6:]).get("rollcheck_sent_at")
                                if sent:
                                    skews.append(now - sent)

        await asyncio.gather(*(user(i) for i in range(users)))
    wall = time.time() - t0
    skews.sort()
    return {
        "events_per_s": events / wall,
        "skew_p50_ms": 1000 * skews[len(skews) // 2] if skews else 0,
        "skew_p99_ms": 1000 * skews[int(0.99 * len(skews))] if skews else 0,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", default="50,100,200")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--workers", default="1,2", help="Locust worker counts (0: one process)")
    args = ap.parse_args()
    tokens = int((args.seconds + 3) / 0.02)
    settings = SimSettings(
        port=free_port(), ttft_s=0.01, itl_s=0.02, max_num_seqs=4096, send_timestamps=True
    )
    with running_sim(settings) as url:
        print(
            f"{'client':<18}{'streams':>8}{'events/s':>10}{'skew p50 ms':>13}"
            f"{'skew p99 ms':>13}{'ratio':>7}{'delay p99 ms':>14}{'cpu max':>9}"
        )
        for n in (int(x) for x in args.levels.split(",")):
            ref = asyncio.run(_reference(url, n, args.seconds, tokens))
            print(
                f"{'asyncio httpx':<18}{n:>8}{ref['events_per_s']:>10.0f}"
                f"{ref['skew_p50_ms']:>13.2f}{ref['skew_p99_ms']:>13.2f}{'':>7}"
            )
            for workers in (int(w) for w in args.workers.split(",")):
                r = locust_run(url, n, workers, args.seconds, tokens)
                ratio = r["events_per_s"] / ref["events_per_s"] if ref["events_per_s"] else 0
                print(
                    f"{f'locust {workers} worker':<18}{n:>8}{r['events_per_s']:>10.0f}"
                    f"{r['skew_p50_ms']:>13.2f}{r['skew_p99_ms']:>13.2f}{ratio:>7.2f}"
                    f"{r['delay_p99_ms']:>14.1f}{r['cpu_max']:>9.0%}"
                )


if __name__ == "__main__":
    main()
