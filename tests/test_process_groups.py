"""Nothing of a run is left when a part dies first: every process group the harness
starts is ended at stop whether or not its leader is still alive. nginx's workers kept
the gateway's listening socket after its master was SIGKILLed mid-run."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from harness.proc import free_port

pytestmark = pytest.mark.process


def group(pgid: int) -> list[int]:
    """The processes in a process group (read from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def test_nginx_workers_are_ended_when_the_master_died_first(tmp_path):
    from harness.cluster.local.nginx import Nginx

    port = free_port()
    gw = Nginx(tmp_path, port, 0.0, 60)
    gw.start()
    leader = gw.proc.pid
    assert len(group(leader)) >= 2  # the master and its workers
    os.kill(leader, signal.SIGKILL)  # mid-run, as the drain test's chaos does
    gw.proc.wait(5)
    time.sleep(0.2)
    assert group(leader), "nginx's workers outlive their master"
    gw.stop()
    deadline = time.monotonic() + 5
    while group(leader) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group(leader) == []
    with socket.socket() as s:  # the gateway's port is free again
        s.bind(("127.0.0.1", port))


def test_locust_is_ended_when_its_master_or_a_worker_died_first(sim_factory, tmp_path):
    from harness.config.load import LoadSettings, Share
    from harness.load import LoadRun
    from harness.streams import Thresholds

    sim = sim_factory(itl_s=0.02)
    settings = LoadSettings(users=2, workers=2, max_tokens=[Share(20)], stop_timeout_s=0.5)
    run = LoadRun(sim.url, tmp_path, settings, Thresholds(5))
    run.start()
    try:
        run.wait_until_sent(4, timeout_s=30)
        leaders = [run.master.pid, *(w.pid for w in run.workers)]
        os.kill(run.workers[0].pid, signal.SIGKILL)
        os.kill(run.master.pid, signal.SIGKILL)
    finally:
        run.close()
    time.sleep(0.3)
    assert [p for pid in leaders for p in group(pid)] == []


def test_nginx_and_its_workers_end_when_the_harness_itself_is_killed(tmp_path):
    """The harness SIGKILLed mid-run (a CI job's timeout, an OOM kill): its gateway's
    master and workers go too, and the port is free. With SIGKILL as the master's
    parent-death signal, the workers (the master's children) stayed, listening."""
    import subprocess
    import sys

    port = free_port()
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from harness.cluster.local.nginx import Nginx\n"
        f"gw = Nginx(Path({str(tmp_path)!r}), {port}, 0.0, 60)\n"
        "gw.start()\n"
        "print(gw.proc.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    harness = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=Path.cwd()
    )
    try:
        leader = int(harness.stdout.readline())
        assert len(group(leader)) >= 2  # the master and its workers
    finally:
        harness.kill()
        harness.wait(10)
    deadline = time.monotonic() + 10
    while group(leader) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group(leader) == [], "nginx outlived the harness that started it"
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
