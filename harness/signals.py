"""SIGTERM and SIGHUP handled like Ctrl-C: a CronJob's deadline, a node drain, `kill` or a
closed terminal stops rollcheck the way an operator's Ctrl-C does, so every `finally`
and fixture teardown runs and the target is put back (nothing is left listening), and
then it exits 128 + the signal's number (143 for SIGTERM, 129 for SIGHUP).

One path for every command: `main` installs the handler once; a command catches
KeyboardInterrupt to clean up and returns `exit_code(exc)`.
"""

from __future__ import annotations

import signal
import threading

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: unwind as for Ctrl-C."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum, frame) -> None:
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_DFL)  # a second signal ends it at once
    raise Terminated(signum)


def handle_sigterm() -> None:
    """Install the handler (signals reach Python's main thread only)."""
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, _raise)


def exit_code(exc: BaseException, ctrl_c: int = 130) -> int:
    """The exit status for an interrupted command: 128 + signal for SIGTERM or SIGHUP;
    for Ctrl-C, `ctrl_c` (130; 0 for a command that runs until Ctrl-C, as `up`)."""
    if isinstance(exc, Terminated):
        return 128 + int(exc.signum)
    return ctrl_c
