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
