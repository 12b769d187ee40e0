"""SIGTERM handled like Ctrl-C: a CronJob's deadline, a node drain or `kill` stops
rollcheck the way an operator's Ctrl-C does, so every `finally` and fixture teardown
runs and the target is put back, and then it exits non-zero."""

from __future__ import annotations

import signal
import threading


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: unwind as for Ctrl-C."""


def _raise(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends it at once
    raise Terminated("SIGTERM")


def handle_sigterm() -> None:
    """Install the handler (signals reach Python's main thread only)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise)
