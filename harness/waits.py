"""The one bounded wait: a condition, a timeout, an interval, and what it was waiting for.

Every wait in rollcheck goes through `wait_until` (or `hold`, for a fixed time during
which something must stay alive), so a timeout always reads the same way: "timed out
after 30 s waiting for 2 streams in flight", raised as the caller's own error type.
No dependencies: the load's gevent workers pass their own sleep.

Each wait is told to the watch, if one is set (harness.progress: a scenario's status line
and its time spent waiting): watch.begin(what, bound_s) returns a token for watch.end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Protocol, TypeVar

from harness.errors import RollcheckError

T = TypeVar("T")


class WaitTimeout(RollcheckError):
    """A condition did not hold in time."""


class Watch(Protocol):
    def begin(self, what: str, bound_s: float) -> object: ...

    def end(self, token: object) -> None: ...


_watch: list[Watch | None] = [None]


def set_watch(watch: Watch | None) -> Watch | None:
    """Tell every wait from now to `watch` (None: to nobody); returns the one before."""
    before, _watch[0] = _watch[0], watch
    return before


def current_watch() -> Watch | None:
    return _watch[0]


@contextmanager
def watched(what: str, bound_s: float):
    """A wait of the caller's own (a process's exit, say), told to the watch as every
    wait_until and hold is."""
    watch = _watch[0]
    token = watch.begin(what, bound_s) if watch is not None else None
    try:
        yield
    finally:
        if watch is not None:
            watch.end(token)


def wait_until(
    cond: Callable[[], T],
    timeout_s: float,
    what: str,
    interval_s: float = 0.05,
    error: Callable[[str], Exception] | None = WaitTimeout,
    alive: Callable[[], object] | None = None,
    detail: Callable[[], str] | None = None,
    sleep: Callable[[float], object] = time.sleep,
    progress: Callable[[], object] | None = None,
    ceiling_s: float | None = None,
) -> T:
    """Call `cond` every interval_s until it returns something truthy, and return that.

    alive: called before each try; it raises to end the wait early (a process that
    died). detail: a few words appended to the timeout message (the last status seen).
    error=None: a wait at most, returning the last (falsy) value at the deadline.
    progress: while its value keeps changing (an engine's log growing as it loads
    weights and compiles), timeout_s counts from its last change, up to ceiling_s in
    all: a slow start that advances is waited for, a stuck one is not.
    The condition is always tried at least once, and once more at the deadline."""
    with watched(what, max(timeout_s, ceiling_s or 0.0)):
        return _wait_until(
            cond, timeout_s, what, interval_s, error, alive, detail, sleep, progress, ceiling_s
        )


def _wait_until(
    cond, timeout_s, what, interval_s, error, alive, detail, sleep, progress, ceiling_s
):
    start = last_change = time.monotonic()
    seen = progress() if progress is not None else None
    ceiling = start + (ceiling_s if ceiling_s is not None else timeout_s)
    while True:
        if alive is not None:
            alive()
        value = cond()
        if value:
            return value
        now = time.monotonic()
        if progress is not None:
            current = progress()
            if current != seen:
                seen, last_change = current, now
        deadline = min(last_change + timeout_s, max(ceiling, start + timeout_s))
        left = deadline - now
        if left <= 0:
            if error is None:
                return value
            extra = f" ({detail()})" if detail is not None else ""
            if progress is None:
                took = f"{timeout_s:g} s"
            elif now - last_change >= timeout_s:
                took = f"{now - start:.0f} s, the last {timeout_s:g} s without progress,"
            else:
                took = f"{now - start:.0f} s (the ceiling)"
            raise error(f"timed out after {took} waiting for {what}{extra}")
        sleep(min(interval_s, left))


def hold(
    seconds: float,
    alive: Callable[[], object] | None = None,
    interval_s: float = 0.1,
    sleep: Callable[[float], object] = time.sleep,
    what: str = "time to pass",
) -> None:
    """Let `seconds` pass, calling `alive` every interval_s (it raises to stop early)."""
    with watched(what, seconds):
        _hold(seconds, alive, interval_s, sleep)


def _hold(seconds, alive, interval_s, sleep) -> None:
    deadline = time.monotonic() + seconds
    while True:
        if alive is not None:
            alive()
        left = deadline - time.monotonic()
        if left <= 0:
            return
        sleep(min(interval_s, left))
