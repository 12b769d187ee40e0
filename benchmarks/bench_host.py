"""Does this machine run at a steady speed? Slow windows explain noisy latency figures.

Run: .venv/bin/python -m benchmarks.bench_host [--seconds 10]

One process per CPU repeats a fixed unit of arithmetic at a light duty cycle and
times each unit. A window is a stretch where units take over twice the usual
(median) time. Windows that start at the same moment on every CPU are the host slowing the
whole machine (a virtual machine's CPU quota or a busy neighbour), not this
machine's own load; no process inside can avoid them. Prints, per CPU, how many
windows, how long, how much slower, and the share of time spent in them.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time

UNIT_LOOPS = 400  # about 15-30 us of work on current CPUs
DUTY = 0.3  # busy share of each CPU: light enough to leave the machine idle-ish


def _unit() -> None:
    x = 1
    for _ in range(UNIT_LOOPS):
        x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF


def _probe(cpu: int, seconds: float, out) -> None:
    os.sched_setaffinity(0, {cpu})
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        _unit()  # after a sleep caches are cold: warm up, then time the next unit
        t0 = time.monotonic()
        _unit()
        took = time.monotonic() - t0
        samples.append((t0, took))
        time.sleep(took * (1 - DUTY) / DUTY)
    out.put((cpu, samples))


def windows(samples: list[tuple[float, float]], gap_s: float = 0.05) -> list[list[float]]:
    """[start, end, worst slowdown] of the stretches where units ran over 2x the median."""
    usual = sorted(took for _, took in samples)[len(samples) // 2]
    found: list[list[float]] = []
    for t, took in samples:
        if took > 2 * usual:
            if found and t - found[-1][1] < gap_s:
                found[-1][1] = t + took
                found[-1][2] = max(found[-1][2], took / usual)
            else:
                found.append([t, t + took, took / usual])
    return [w for w in found if w[1] - w[0] >= 0.01]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    out = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_probe, args=(c, args.seconds, out)) for c in cpus]
    for p in procs:
        p.start()
    results = dict(out.get() for _ in procs)
    for p in procs:
        p.join()
    found = {cpu: windows(results[cpu]) for cpu in cpus}
    print(f"{'cpu':>4} {'windows':>8} {'per s':>6} {'mean ms':>8} {'worst x':>8} {'time %':>7}")
    for cpu, ws in found.items():
        total = sum(e - s for s, e, _ in ws)
        mean_ms = 1000 * total / len(ws) if ws else 0.0
        worst = max((x for _, _, x in ws), default=1.0)
        print(
            f"{cpu:>4} {len(ws):>8} {len(ws) / args.seconds:>6.2f} {mean_ms:>8.0f} "
            f"{worst:>8.1f} {100 * total / args.seconds:>7.1f}"
        )
    if len(found) > 1:
        first, *others = found.values()
        shared = sum(
            all(any(s <= w[1] and w[0] <= e for w in ws) for ws in others) for s, e, _ in first
        )
        print(f"windows on cpu {cpus[0]} that every other CPU shares: {shared} of {len(first)}")


if __name__ == "__main__":
    main()
