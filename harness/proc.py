"""Small process and socket helpers shared by the targets and the tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx

from harness.sim.settings import SimSettings, to_args


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def sim_command(settings: SimSettings) -> list[str]:
    return [sys.executable, "-m", "harness.cli", "sim", *to_args(settings)]


def start_sim(settings: SimSettings, **popen) -> subprocess.Popen:
    """Start `rollcheck sim` in its own process group (so it can be stopped whole)."""
    settings.validate()
    return subprocess.Popen(sim_command(settings), start_new_session=True, **popen)


def wait_http(url: str, timeout_s: float = 15.0, proc: subprocess.Popen | None = None) -> None:
    """Wait until GET url answers 200; raise with the reason otherwise."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            r = httpx.get(url, timeout=1.0)
            if r.status_code == 200:
                return
            last = f"HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer 200 within {timeout_s} s ({last})")


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGKILL, wait_s: float = 5.0) -> None:
    """Signal a process group started with start_new_session and reap the leader."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
