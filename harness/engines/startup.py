"""A real engine's start-up, waited for by its progress rather than a fixed bound.

Real vLLM on this machine takes 35-120 s to start, minutes more on a cold compile cache
beside other work (docs/facts.md). A fixed bound either fails a slow start that is
going fine or waits minutes for a dead one. So a start is followed by its log: while
the engine keeps writing (weights, compile, KV cache profiling, "Application startup
complete") the wait goes on, up to a generous ceiling; a log silent for `stall_s` is a
stuck start, and the failure quotes the log, the time and the machine's load.

Engines that start side by side share the cores they compile on: `StartGate` lets as
many start at once as the machine has free cores, the rest after them.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from harness.errors import RollcheckError
from harness.waits import wait_until

# the longest silence of a healthy start's log (benchmarks/bench_engine.py, the slow
# model, 2 cores): 17-19 s on a warm compile cache, 33-35 s beside two busy loops, 52-74 s
# on a cold cache (torch.compile); a start silent for three times the worst is stuck
STALL_S = 240.0
CEILING_S = 1200.0  # the longest any start is waited for, however much it logs


class StartupFailed(RollcheckError):
    """A real engine did not start: its log stopped, it exited, or the ceiling passed."""


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def log_tail(path: Path, lines: int = 15) -> list[str]:
    """The last lines of a log (read from its end: a start-up log can be large)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, log_size(path) - 16384))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def machine_load() -> str:
    """The load average against the cores, for a message about a slow start."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def wait_started(
    ready: Callable[[], bool],
    log: Path,
    what: str,
    alive: Callable[[], object] | None = None,
    stall_s: float = STALL_S,
    ceiling_s: float = CEILING_S,
) -> float:
    """Until ready(), while `log` keeps growing (at most stall_s between two writes, at
    most ceiling_s in all); returns the seconds it took. alive raises to stop early (the
    engine exited). StartupFailed quotes the log's last lines and the machine's load."""
    t0 = time.monotonic()

    def failed(message: str) -> StartupFailed:
        tail = "\n  ".join(log_tail(log))
        return StartupFailed(
            f"{what}: {message}; {machine_load()}; its log ({log}) ends:\n  {tail}"
        )

    wait_until(
        ready,
        stall_s,
        f"{what} to start",
        interval_s=0.2,
        error=failed,
        alive=alive,
        progress=lambda: log_size(log),
        ceiling_s=ceiling_s,
    )
    return time.monotonic() - t0


def free_cores(sample_s: float = 1.0) -> float:
    """Cores left idle by everything running now, from /proc/stat over sample_s."""

    def times() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return idle, sum(fields[:8])

    idle0, total0 = times()
    time.sleep(sample_s)
    idle1, total1 = times()
    share = (idle1 - idle0) / max(1, total1 - total0)
    return share * (os.cpu_count() or 1)


class StartGate:
    """At most `slots` engines start at once; the others wait their turn (as the
    kubelet pulls images one at a time). One slot per free core, at least one: on a
    busy machine two engines compiling side by side take longer than one after the
    other, and each may pass its start-up bound."""

    def __init__(self, slots: int):
        self.slots = max(1, slots)
        self._sem = threading.BoundedSemaphore(self.slots)

    @classmethod
    def for_this_machine(cls) -> StartGate:
        return cls(round(free_cores()))

    def try_acquire(self) -> bool:
        return self._sem.acquire(blocking=False)

    def acquire(self, cancelled: Callable[[], bool] = lambda: False) -> bool:
        """Take a slot; False if `cancelled` became true while waiting."""
        while not self._sem.acquire(timeout=0.2):
            if cancelled():
                return False
        return True

    def release(self) -> None:
        self._sem.release()
