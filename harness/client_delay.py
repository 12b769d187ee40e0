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
        self._closed: list[dict] = []
        self._cpu_at = (clock(), cpu())

    def add(self, lag_s: float) -> None:
        second = int(self._clock())
        if self._second is not None and second != self._second:
            self._close()
        self._second = second
        k = bucket(lag_s)
        self._hist[k] = self._hist.get(k, 0) + 1
        self._max = max(self._max, lag_s)

    def _close(self) -> None:
        if self._second is None or not self._hist:
            return
        now, cpu = self._clock(), self._cpu()
        wall = now - self._cpu_at[0]
        share = (cpu - self._cpu_at[1]) / wall if wall > 0 else None
        self._cpu_at = (now, cpu)
        self._closed.append(
            {
                "t": self._second,
                "h": dict(self._hist),
                "max_s": round(self._max, 6),
                "cpu": None if share is None else round(share, 3),
            }
        )
        self._hist, self._max, self._second = {}, 0.0, None

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
    """p50, p99 and max lateness, the samples, the highest CPU share of a worker in one
    second, and how many workers reported, over some windows (None when none)."""
    hist: dict[int, int] = {}
    worst, cpu, workers = 0.0, None, set()
    for w in windows:
        merge(hist, w["h"])
        worst = max(worst, float(w.get("max_s") or 0.0))
        if isinstance(w.get("cpu"), (int, float)):
            cpu = max(cpu or 0.0, float(w["cpu"]))
        workers.add(w.get("worker"))
    if not hist:
        return None
    return {
        "p50_s": round(quantile(hist, 0.5), 6),
        "p99_s": round(quantile(hist, 0.99), 6),
        "max_s": worst,
        "samples": sum(hist.values()),
        "cpu_max": cpu,
        "workers": len(workers),
    }


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
