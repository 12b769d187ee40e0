"""Reading processes from /proc, as the gateway's reload and the leftover reaper do."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.proc import children, cmdline, processes

pytestmark = pytest.mark.process


def test_children_and_their_command_lines():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in children(os.getpid())
        # The scan used where the kernel lacks /proc/PID/task/PID/children agrees.
        scanned = [pid for pid, fields in processes() if fields[1] == str(os.getpid())]
        assert sorted(scanned) == sorted(children(os.getpid()))
        assert cmdline(child.pid).endswith("import time; time.sleep(30)")
    finally:
        child.kill()
        child.wait()
    assert child.pid not in children(os.getpid())
    assert cmdline(child.pid) == ""


def test_the_reaper_leaves_kube_locals_node_records_to_their_own_clean_up(tmp_path, monkeypatch):
    """A local run's reaper deleted the records of a killed kube-local's nodes (they live
    in the same folder), so the next kube-local start found nothing to clean: containers,
    bridges and mounts were left (CI: a local run beside the kube tier did it)."""
    import json

    import harness.proc as proc

    monkeypatch.setattr(proc, "PID_DIR", tmp_path)
    dead = subprocess.Popen(["true"])
    dead.wait()
    node = tmp_path / f"kube-node-{dead.pid}-kube-local-node-0.json"
    node.write_text(json.dumps({"owner": dead.pid, "node": "kube-local-node-0", "pids": {}}))
    mine = tmp_path / f"local-{dead.pid}.json"
    mine.write_text(json.dumps({"owner": dead.pid, "groups": {}}))
    proc.reap_leftovers()
    assert node.exists() and not mine.exists()


def test_a_lasting_port_is_outside_what_the_kernel_hands_out():
    """A port bound long after it is chosen (vLLM's NIXL side channel) is one no outgoing
    connection takes: below the ephemeral range (and Kubernetes' NodePorts), and free."""
    import socket
    from pathlib import Path

    from harness.proc import lasting_port

    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(20):
        port = lasting_port()
        assert 1024 < port < min(low, 30000)
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
