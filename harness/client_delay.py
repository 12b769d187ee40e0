"""The load generator's own delay: how late its event loop runs, second by second.

A Locust worker is one gevent hub: every stream it reads waits for the hub to come
round to it. A timer greenlet that asks to sleep `PERIOD_S` and wakes late measures
exactly that wait: a chunk that reached the socket while the hub was busy elsewhere is
read that much later, and the TTFT and ITL the worker records grow by it. The worker
keeps those latenesses as histograms, one a second (`Windows`), with the share of a CPU
the process used in that second, and ships the closed seconds to the master, which
writes them to <run>/load/client_delay.jsonl. The judge reads them back per phase
(`by_phase`): bounded whatever the run's length (one line a worker a second, a few
dozen buckets each).

A second measure, where the reads are stamped (harness.http1 over plain http): for each
piece of a body, the time from its arrival in the socket (the kernel's receive time) to
its reading and time stamp (`Windows.arrived`). It is the error in that piece's own
timing, not a sample of it. A window holds both; `summarize` reads the client's delay
as the larger of the two at each quantile (`p99_s`, `max_s`), and each on its own
(`loop_*`, `arrival_*`).

Buckets are 10% wide from 0.1 ms (`bucket`, `upper`): a quantile read from them is the
bucket's upper edge, so it overstates the delay by at most 10%, never understates it.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable
from pathlib import Path

PERIOD_S = 0.02  # the timer's sleep: 50 samples a second
FLOOR_S = 1e-4  # bucket 0 holds every lateness up to 0.1 ms
GROWTH = 1.1
FILE = "client_delay.jsonl"
MAX_LINES = 1_000_000  # a worker a second: over 11 days of one worker, never all kept


def bucket(lag_s: float) -> int:
    if lag_s <= FLOOR_S:
        return 0
    return math.ceil(math.log(lag_s / FLOOR_S) / math.log(GROWTH))


def upper(k: int) -> float:
    """The largest lateness bucket k holds."""
    return FLOOR_S * GROWTH**k


def merge(into: dict[int, int], hist: dict) -> dict[int, int]:
    for k, n in hist.items():
        k = int(k)  # JSON keys are strings
        into[k] = into.get(k, 0) + int(n)
    return into


def quantile(hist: dict[int, int], q: float) -> float | None:
    """The q-quantile of a histogram, as its bucket's upper edge (None when empty)."""
    total = sum(hist.values())
    if not total:
        return None
    rank = math.ceil(q * total)
    seen = 0
    for k in sorted(hist):
        seen += hist[k]
        if seen >= rank:
            return upper(k)
    return upper(max(hist))


class Windows:
    """One worker's latenesses, a histogram a second, and its CPU share in each."""

    def __init__(self, clock=time.time, cpu=lambda: sum(os.times()[:2])) -> None:
        self._clock = clock
        self._cpu = cpu
        self._second: int | None = None
        self._hist: dict[int, int] = {}
        self._max = 0.0
        self._arrived: dict[int, int] = {}
        self._arrived_max = 0.0
        self._closed: list[dict] = []
        self._cpu_at = (clock(), cpu())

    def add(self, lag_s: float) -> None:
        self._now()
        k = bucket(lag_s)
        self._hist[k] = self._hist.get(k, 0) + 1
        self._max = max(self._max, lag_s)

    def arrived(self, wait_s: float) -> None:
        """A piece of a body waited wait_s in the socket before it was read."""
        self._now()
        k = bucket(wait_s)
        self._arrived[k] = self._arrived.get(k, 0) + 1
        if wait_s > self._arrived_max:
            self._arrived_max = wait_s

    def _now(self) -> None:
        """Into this second's window (the last one closes when a new second begins)."""
        second = int(self._clock())
        if self._second is not None and second != self._second:
            self._close()
        self._second = second

    def _close(self) -> None:
        if self._second is None or not (self._hist or self._arrived):
            return
        now, cpu = self._clock(), self._cpu()
        wall = now - self._cpu_at[0]
        share = (cpu - self._cpu_at[1]) / wall if wall > 0 else None
        self._cpu_at = (now, cpu)
        window = {
            "t": self._second,
            "h": dict(self._hist),
            "max_s": round(self._max, 6),
            "cpu": None if share is None else round(share, 3),
        }
        if self._arrived:
            window["a"] = dict(self._arrived)
            window["a_max_s"] = round(self._arrived_max, 6)
        self._closed.append(window)
        self._hist, self._max, self._second = {}, 0.0, None
        self._arrived, self._arrived_max = {}, 0.0

    def take(self, final: bool = False) -> list[dict]:
        """The seconds closed since the last take (and the open one too when final)."""
        if final:
            self._close()
        out, self._closed = self._closed, []
        return out


def read(run_dir: Path) -> list[dict]:
    """The run's windows, every worker's (empty when the load wrote none)."""
    path = Path(run_dir) / "load" / FILE
    out: list[dict] = []
    try:
        with path.open() as f:
            for i, line in enumerate(f):
                if i >= MAX_LINES:
                    break
                try:
                    w = json.loads(line)
                except ValueError:
                    continue
                if isinstance(w, dict) and isinstance(w.get("h"), dict):
                    out.append(w)
    except OSError:
        return []
    return out


def summarize(windows: Iterable[dict]) -> dict | None:
    """The client's delay over some windows (None when none): p50, p99 and max as the
    larger of its two measures, each measure's own (loop_*: the timer's lateness;
    arrival_*: a piece's wait in the socket, None where reads were not stamped), the
    timer's samples, the highest CPU share of a worker in one second, and how many
    workers reported."""
    hist: dict[int, int] = {}
    arrived: dict[int, int] = {}
    worst, arrived_worst, cpu, workers = 0.0, 0.0, None, set()
    for w in windows:
        merge(hist, w["h"])
        worst = max(worst, float(w.get("max_s") or 0.0))
        if isinstance(w.get("a"), dict):
            merge(arrived, w["a"])
            arrived_worst = max(arrived_worst, float(w.get("a_max_s") or 0.0))
        if isinstance(w.get("cpu"), (int, float)):
            cpu = max(cpu or 0.0, float(w["cpu"]))
        workers.add(w.get("worker"))
    if not hist and not arrived:
        return None
    out: dict = {}
    for q, name in ((0.5, "p50_s"), (0.99, "p99_s")):
        loop, arrival = quantile(hist, q), quantile(arrived, q)
        out["loop_" + name] = None if loop is None else round(loop, 6)
        out["arrival_" + name] = None if arrival is None else round(arrival, 6)
        out[name] = round(max(loop or 0.0, arrival or 0.0), 6)
    out["loop_max_s"] = worst if hist else None
    out["arrival_max_s"] = arrived_worst if arrived else None
    out["max_s"] = max(worst, arrived_worst)
    out["samples"] = sum(hist.values())
    out["arrival_samples"] = sum(arrived.values())
    out["cpu_max"] = cpu
    out["workers"] = len(workers)
    return out


def by_phase(windows: list[dict], phase_at) -> dict[str, dict]:
    """summarize() per phase (`phase_at(t)` names the phase of an epoch second's middle),
    and over the whole run as "all"; phases without a window are left out."""
    groups: dict[str, list[dict]] = {}
    for w in windows:
        groups.setdefault(phase_at(w["t"] + 0.5), []).append(w)
    out = {p: s for p, ws in groups.items() if (s := summarize(ws)) is not None}
    whole = summarize(windows)
    if whole is not None:
        out["all"] = whole
    return out
