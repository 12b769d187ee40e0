"""No thread of rollcheck's outlives the session.

A daemon thread still running when the interpreter finalizes (a watch in a request, a
poll logging a retry to stderr) can abort the whole process after its last line:
CPython's "Fatal Python error: _enter_buffered_busy: could not acquire lock for
<_io.BufferedWriter name='<stderr>'> at interpreter shutdown, possibly due to daemon
threads" is an abort(), exit status 134, and a nightly Job that passed reads as failed.
Each part joins its own threads when it stops; `outliving` is the last check, at the
end of the pytest session: it waits a little for any that are still ending, and names
the ones that would not.
"""

from __future__ import annotations

import threading
import time

# the names rollcheck gives its threads (watches.py, progress.py, scenario.py, the
# local target's parts, kube-local's)
OWN = ("watch-", "gateway-log-", "engine-log-", "health", "engine-witness", "progress",
       "gateway", "controller", "pod-", "ingress", "prometheus-sd", "golden-")  # fmt: skip


def own(thread: threading.Thread) -> bool:
    return thread is not threading.current_thread() and thread.name.startswith(OWN)


def outliving(timeout_s: float = 5.0) -> list[str]:
    """Join rollcheck's threads still alive, up to timeout_s in all; the names of those
    still running after it."""
    deadline = time.monotonic() + timeout_s
    for t in [t for t in threading.enumerate() if own(t)]:
        t.join(max(0.0, deadline - time.monotonic()))
    return sorted(t.name for t in threading.enumerate() if own(t) and t.is_alive())
