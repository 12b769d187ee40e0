"""Small process and socket helpers shared by the targets and the tests."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx

from harness.client import http_get
from harness.files import write_atomic
from harness.sim.settings import SimSettings, to_args
from harness.waits import wait_until


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def lasting_port(host: str = "127.0.0.1") -> int:
    """A free port below the kernel's ephemeral range, for a process that binds it long
    after it is chosen. free_port's are from that range, where every outgoing connection
    takes its local port: vLLM's NIXL side channel binds a minute after its engine starts,
    and once found its port (from free_port) taken (docs/facts.md). Below the range only a
    process that names a port binds it (and below 30000: Kubernetes' NodePorts are
    30000-32767)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    first, end = max(1025, low - 12000), min(low, 30000)
    for _ in range(200 if first < end else 0):  # a range from 1024 up leaves none below
        port = rng.randrange(first, end)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    return free_port(host)


def sim_command(settings: SimSettings) -> list[str]:
    return [sys.executable, "-m", "harness.cli", "sim", *to_args(settings)]


def start_sim(settings: SimSettings, **popen) -> subprocess.Popen:
    """Start `rollcheck sim` in its own process group (so it can be stopped whole)."""
    settings.validate()
    return subprocess.Popen(sim_command(settings), start_new_session=True, **popen)


@contextlib.contextmanager
def running_sim(settings: SimSettings) -> Iterator[str]:
    """A simulator answering /health, yielded as its URL; its group is killed on exit."""
    proc = start_sim(settings)
    url = f"http://{settings.host}:{settings.port}"
    try:
        wait_http(url + "/health", proc=proc)
        yield url
    finally:
        stop_group(proc, signal.SIGKILL)


def refuses_connections(port: int, host: str = "127.0.0.1") -> bool:
    """Whether nothing listens on host:port any more (a closed listener)."""
    try:
        socket.create_connection((host, port), timeout=1).close()
        return False
    except ConnectionRefusedError:
        return True


def wait_http(url: str, timeout_s: float = 15.0, proc: subprocess.Popen | None = None) -> None:
    """Wait until GET url answers 200; raise with the reason otherwise."""
    last = ["no answer"]

    def exited():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")

    def answers_200() -> bool:
        try:
            r = http_get(url, timeout=1.0)
            last[0] = f"HTTP {r.status_code}"
            return r.status_code == 200
        except httpx.HTTPError as exc:
            last[0] = type(exc).__name__
            return False

    wait_until(
        answers_200,
        timeout_s,
        f"{url} to answer 200",
        error=TimeoutError,
        alive=exited,
        detail=lambda: last[0],
    )


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Signal the process group a start_new_session child leads, whether or not the
    leader is still alive: its children (nginx's workers, vLLM's engine core) outlive a
    leader that died first. The group's id is not reused while any member is left, so
    this reaches only the run's own processes; an empty group is no error."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGKILL, wait_s: float = 5.0) -> None:
    """Signal a process group started with start_new_session and reap the leader; the
    group's other members are ended even when the leader died before."""
    if proc.poll() is None:
        kill_group(proc, sig)
    else:
        kill_group(proc, signal.SIGKILL)
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # the group ended between the wait and the kill
            pass
        proc.wait()


PID_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rollcheck" / "pids"
# Process groups we may reap: a process still in the group names one of these.
OURS = (
    "harness.cli sim",
    "vllm serve",
    "nginx",
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
)


class PidFile:
    """The process groups a harness process started, read at the next start:
    if the harness was killed, what it left behind is reaped then."""

    def __init__(self, kind: str):
        self.path = PID_DIR / f"{kind}-{os.getpid()}.json"
        self.groups: dict[str, int] = {}

    def remember(self, name: str, pgid: int) -> None:
        self.groups[name] = pgid
        PID_DIR.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps({"owner": os.getpid(), "groups": self.groups}))

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


def reap_leftovers() -> list[int]:
    """Kill the process groups left by harness processes that died without cleaning up."""
    killed = []
    if not PID_DIR.exists():
        return killed
    for pidfile in PID_DIR.glob("*.json"):
        try:
            data = json.loads(pidfile.read_text())
        except (OSError, ValueError):
            pidfile.unlink(missing_ok=True)
            continue
        if not isinstance(data, dict) or "groups" not in data:
            # another record's (kube-local's nodes: harness.cluster.kubelocal.node), which
            # its own clean-up reads: deleting it here left a killed kube-local's
            # containers, bridges and mounts behind (a local run beside it did, in CI)
            continue
        if pid_alive(data.get("owner", 0)):
            continue
        for pgid in data.get("groups", {}).values():
            if _ours(pgid):
                try:
                    os.killpg(pgid, signal.SIGKILL)
                    killed.append(pgid)
                except ProcessLookupError:
                    pass
        pidfile.unlink(missing_ok=True)
    return killed


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _ours(pgid: int) -> bool:
    """Whether any process still in the group is one of ours (pids get reused). The
    leader may be gone: nginx workers outlive a master killed on its own."""
    return any(
        fields[2] == str(pgid) and any(name in cmdline(pid) for name in OURS)
        for pid, fields in processes()
    )


def processes() -> Iterator[tuple[int, list[str]]]:
    """Every process: (pid, its /proc stat fields after the name: state, ppid, pgrp, ...)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            yield int(stat.parent.name), stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue


def children(pid: int) -> list[int]:
    """The child processes of pid."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN: scan /proc
        return [child for child, fields in processes() if fields[1] == str(pid)]


def cmdline(pid: int) -> str:
    """pid's command line, its arguments joined by spaces; "" once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()
