"""Load generator capacity: streams and token events/s per Locust worker, against a
minimal asyncio httpx client doing the same work, with the client timing skew.

Run: .venv/bin/python -m benchmarks.bench_load [--levels 50,100,200] [--seconds 6]
     [--workers 0,1,2] [--readers httpx,lean] [--itl 0.02] [--no-reference]
Each level is read by each worker count with each reader (load.http_client) in turn.
Skew = arrival time - the simulator's send stamp per chunk (--send-timestamps).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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


def locust_run(
    url: str, users: int, workers: int, seconds: float, tokens: int, reader: str = "lean"
) -> dict:
    with tempfile.TemporaryDirectory() as d:
        s = LoadSettings(
            http_client=reader,
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
    out["socket_p99_ms"] = 1000 * (delay.get("arrival_p99_s") or 0.0)
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
    ap.add_argument("--readers", default="httpx,lean", help="load.http_client values, in turn")
    ap.add_argument("--itl", type=float, default=0.02, help="the simulator's seconds a token")
    ap.add_argument("--no-reference", action="store_true", help="skip the asyncio client")
    ap.add_argument(
        "--sims", type=int, default=1, help="simulators; more than one: behind the local nginx"
    )
    args = ap.parse_args()
    tokens = int((args.seconds + 3) / args.itl)
    with contextlib.ExitStack() as stack:
        urls = [
            stack.enter_context(
                running_sim(
                    SimSettings(
                        port=free_port(),
                        ttft_s=0.01,
                        itl_s=args.itl,
                        max_num_seqs=8192,
                        send_timestamps=True,
                    )
                )
            )
            for _ in range(args.sims)
        ]
        url = urls[0] if len(urls) == 1 else stack.enter_context(gateway(urls))
        _table(url, args, tokens)


@contextlib.contextmanager
def gateway(urls: list[str]):
    """The local target's nginx in front of the simulators, round robin, so that no one
    simulator is the source's bottleneck (nginx runs one worker process, as the local
    target runs it: past some tens of thousands of events/s it is the next one)."""
    from harness.cluster.local.nginx import Nginx
    from harness.waits import wait_until

    with tempfile.TemporaryDirectory() as d:
        nginx = Nginx(Path(d), free_port(), endpoint_delay_s=0.0, read_timeout_s=60.0)
        nginx.start()
        try:
            nginx.set_endpoints([u.removeprefix("http://") for u in urls])
            wait_until(lambda: len(nginx.applied) == len(urls), 10, "nginx to take the sims")
            yield nginx.url
        finally:
            nginx.stop()


def _table(url: str, args, tokens: int) -> None:
    """Each level, read by each worker count with each reader in turn."""
    print(
        f"{'client':<24}{'streams':>8}{'events/s':>10}{'skew p50 ms':>13}"
        f"{'skew p99 ms':>13}{'ratio':>7}{'delay p99 ms':>14}{'socket p99':>11}"
        f"{'cpu max':>9}"
    )
    for n in (int(x) for x in args.levels.split(",")):
        ref = {"events_per_s": 0}
        if not args.no_reference:
            ref = asyncio.run(_reference(url, n, args.seconds, tokens))
            print(
                f"{'asyncio httpx':<24}{n:>8}{ref['events_per_s']:>10.0f}"
                f"{ref['skew_p50_ms']:>13.2f}{ref['skew_p99_ms']:>13.2f}{'':>7}"
            )
        for workers in (int(w) for w in args.workers.split(",")):
            for reader in args.readers.split(","):  # side by side, on one simulator
                r = locust_run(url, n, workers, args.seconds, tokens, reader)
                ratio = r["events_per_s"] / ref["events_per_s"] if ref["events_per_s"] else 0
                print(
                    f"{f'locust {workers} worker {reader}':<24}{n:>8}"
                    f"{r['events_per_s']:>10.0f}{r['skew_p50_ms']:>13.2f}"
                    f"{r['skew_p99_ms']:>13.2f}{ratio:>7.2f}{r['delay_p99_ms']:>14.1f}"
                    f"{r['socket_p99_ms']:>11.1f}{r['cpu_max']:>9.0%}"
                )


if __name__ == "__main__":
    main()
