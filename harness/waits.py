"""The one bounded wait: a condition, a timeout, an interval, and what it was waiting for.

Every wait in rollcheck goes through `wait_until` (or `hold`, for a fixed time during
which something must stay alive), so a timeout always reads the same way: "timed out
after 30 s waiting for 2 streams in flight", raised as the caller's own error type.
No dependencies: the load's gevent workers pass their own sleep.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from harness.errors import RollcheckError

T = TypeVar("T")


class WaitTimeout(RollcheckError):
    """A condition did not hold in time."""


def wait_until(
    cond: Callable[[], T],
    timeout_s: float,
    what: str,
    interval_s: float = 0.05,
    error: Callable[[str], Exception] | None = WaitTimeout,
    alive: Callable[[], object] | None = None,
    detail: Callable[[], str] | None = None,
    sleep: Callable[[float], object] = time.sleep,
) -> T:
    """Call `cond` every interval_s until it returns something truthy, and return that.

    alive: called before each try; it raises to end the wait early (a process that
    died). detail: a few words appended to the timeout message (the last status seen).
    error=None: a wait at most, returning the last (falsy) value at the deadline.
    The condition is always tried at least once, and once more at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        if alive is not None:
            alive()
        value = cond()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            if error is None:
                return value
            extra = f" ({detail()})" if detail is not None else ""
            raise error(f"timed out after {timeout_s:g} s waiting for {what}{extra}")
        sleep(min(interval_s, left))


def hold(
    seconds: float,
    alive: Callable[[], object] | None = None,
    interval_s: float = 0.1,
    sleep: Callable[[float], object] = time.sleep,
) -> None:
    """Let `seconds` pass, calling `alive` every interval_s (it raises to stop early)."""
    deadline = time.monotonic() + seconds
    while True:
        if alive is not None:
            alive()
        left = deadline - time.monotonic()
        if left <= 0:
            return
        sleep(min(interval_s, left))
