"""How many Locust workers a load needs (`load.workers: auto`, the default).

A worker is one process on one core: past what it can read, every stream it holds waits
for it and the latency it records is partly its own (harness/client_delay.py). The load
asks for about users x the engine's tokens a second (a `rate` load: arrivals a second x
the answer's tokens); a worker's budget is what it reads using half a core, measured on
this machine once (harness.load.measure_budget: a real Locust process reading a simulator's streams
at a realistic pace, its events over its CPU seconds) and cached. Auto then starts as
many workers as that takes, up to the cores this process may use (less one on the local
target, whose engines share the machine): one process when one is enough, as before.

A load far below any machine's budget (`NO_NEED_EVENTS_S`) is one process without a
measurement, so small runs never wait for one.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import sys
from pathlib import Path

from harness.files import write_atomic

# below this, one worker keeps up on any machine rollcheck runs on (the slowest measured:
# about 4,000 events/s at half a core, docs/facts.md): no measurement
NO_NEED_EVENTS_S = 1500.0
# a worker is given half a core: its event loop's delay stays low (a busy hub is a late one)
TARGET_CPU = 0.5
# a stream's tokens a second when the engine's pace is not known: a fast GPU engine's
# 20 ms between tokens (20-50 ms is usual), so the estimate errs towards more workers
ASSUMED_TOKENS_S = 50.0
# 2: streams read by harness.http1, about half httpx's CPU an event: budgets measured
# with httpx (1) understate a worker's
CACHE_VERSION = 2


@dataclasses.dataclass
class Sizing:
    workers: int  # local worker processes: 0 is one process (master and users in one)
    why: str  # one line for the session's outlook


def cache_file() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "rollcheck" / "load-budget.json"


def machine_key() -> str:
    """What a cached budget belongs to: this CPU model, its count and this Python."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"v{CACHE_VERSION} {model or platform.machine()} x{os.cpu_count()} py{sys.version_info[:2]}"
    )


def expected_events_s(load, tokens_s: float) -> float:
    """The token events a second the load asks for at its busiest."""
    if load.shape == "rate":
        shares = load.max_tokens
        mean = sum(s.tokens * s.weight for s in shares) / (sum(s.weight for s in shares) or 1)
        return load.rate_rps * mean
    users = max(load.users, load.step_users) if load.shape == "step" else load.users
    return (users + (1 if load.long_answer_user else 0)) * tokens_s


def load_cores(load, local_target: bool) -> int:
    """The cores the load may use: load.cpus, else this process's; one left to the
    engines when they run on this machine."""
    cores = len(load.cpus) if load.cpus else len(os.sched_getaffinity(0))
    return max(1, cores - (1 if local_target and not load.cpus else 0))


def read_budget() -> float | None:
    try:
        data = json.loads(cache_file().read_text())
        value = data.get(machine_key())
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def write_budget(value: float) -> None:
    path = cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        data = data if isinstance(data, dict) else {}
        data[machine_key()] = round(value)
        write_atomic(path, json.dumps(data, indent=1))
    except OSError:  # (a link there too: UnsafeDestination is an OSError)
        pass  # a cache that cannot be written is measured again next time


def budget(measure) -> tuple[float, str]:
    """A worker's budget here, and where it came from (measure: harness.load's
    measure_budget, when none is cached)."""
    cached = read_budget()
    if cached is not None:
        return cached, f"measured on this machine before ({cache_file()})"
    value = measure()
    write_budget(value)
    return value, "measured now, on this machine"


def size(load, tokens_s: float | None, pace: str, local_target: bool, measure) -> Sizing:
    """The workers for `load` (its workers: auto). tokens_s: a stream's tokens a second,
    None when not known (ASSUMED_TOKENS_S); pace says where it came from; measure: what
    measures a worker's budget when none is cached (harness.load.measure_budget)."""
    if tokens_s is None or tokens_s <= 0:
        tokens_s, pace = ASSUMED_TOKENS_S, "assumed (a fast GPU engine's 20 ms between tokens)"
    demand = expected_events_s(load, tokens_s)
    shape = (
        f"{load.rate_rps:g} requests/s, each its answer's tokens"
        if load.shape == "rate"
        else f"{tokens_s:.0f} tokens/s a stream, {pace}"
    )
    asks = f"the load asks for about {demand:,.0f} events/s ({shape})"
    external = load.external_workers
    if demand <= NO_NEED_EVENTS_S:
        if external:
            return Sizing(0, f"load: {external} external workers; {asks}")
        return Sizing(0, f"load: one Locust process; {asks}, within any worker's budget")
    try:
        each, source = budget(measure)
    except Exception as exc:  # (a load that cannot start says so itself, when it runs)
        why = f"{type(exc).__name__}: {exc}"[:200]
        if external:
            return Sizing(0, f"load: {external} external workers; {asks}")
        return Sizing(
            0,
            f"load: one Locust process; {asks}, but a worker's budget could not be measured "
            f"here ({why}); set load.workers to choose",
        )
    need = math.ceil(demand / each)
    budget_text = f"a worker reads {each:,.0f} events/s at half a core here ({source})"
    if external:  # the chart's workers, taken to be as fast as the pod this runs in
        if need > external:
            return Sizing(
                0,
                f"load: {external} external workers, not the {need} it needs: {asks}; "
                f"{budget_text}; raise the chart's locust.workers to {need} (client_kept_up "
                "will say whether they kept up)",
            )
        return Sizing(
            0, f"load: {external} external workers ({need} would do); {asks}; {budget_text}"
        )
    cores = load_cores(load, local_target)
    workers = min(need, cores)
    if need <= 1:
        return Sizing(0, f"load: one Locust process; {asks}; {budget_text}")
    if workers < need:
        return Sizing(
            workers if workers > 1 else 0,
            f"load: {workers} worker(s), not the {need} it needs: {asks}; {budget_text}; this "
            f"machine has {cores} core(s) for the load. client_kept_up will say whether it "
            "kept up; run the load on a larger machine or across the chart's workers",
        )
    return Sizing(workers, f"load: {workers} Locust workers; {asks}; {budget_text}")
