"""The commands against hostile servers, hostile folders and signals (issue 27): each
ends, keeps what it has, and says what went wrong in one line."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.hostile import HostileServer
from tests.test_local_target import FAST

pytestmark = pytest.mark.process


@pytest.fixture
def hostile():
    server = HostileServer()
    yield server
    server.close()


def rollcheck(*args, env=None, timeout=120):
    cmd = [sys.executable, "-m", "harness.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def _as_from_a_terminal() -> None:
    # Ctrl-C comes from a terminal, where SIGINT is at its default. A suite started in
    # the background by a non-interactive shell (`cmd &`) passes SIGINT down ignored,
    # and a process that starts with SIGINT ignored keeps ignoring it, as nohup wants:
    # the SIGINT case then waited for an exit that could not come.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(*args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_as_from_a_terminal,
    )


def records_of(folder):
    return [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines()]


def test_probe_ends_at_its_deadline_and_records_the_cut_streams(hostile, tmp_path):
    t0 = time.monotonic()
    r = rollcheck("probe", hostile.url + "/forever", "-n", "4", "-c", "2", "--timeout", "2",
                  "--out", str(tmp_path / "p"))  # fmt: skip
    took = time.monotonic() - t0
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert r.returncode == 1, r.stderr
    assert took < 15, took
    assert summary["ended"] == "deadline" and summary["sent"] == summary["requests"] == 2
    assert summary["outcomes"]["cancelled"] == 2
    assert "2 streams still open" in r.stdout and "deadline" in r.stdout
    assert len(records_of(tmp_path / "p")) == 2


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_probe_interrupted_writes_what_it_has(hostile, tmp_path, sig, code):
    out = tmp_path / "p"
    proc = start("probe", hostile.url + "/forever", "-n", "3", "-c", "3", "--out", str(out))
    deadline = time.monotonic() + 20
    while hostile.requests["/forever"] < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == code, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ended"] == "interrupted", summary
    assert summary["verdict"] == "inconclusive", summary["checks"]
    assert summary["sent"] == summary["requests"] == 3 == len(records_of(out))
    assert {r["outcome"] for r in records_of(out)} == {"cancelled"}


def test_probe_checks_its_folder_before_the_first_request(hostile, tmp_path):
    (tmp_path / "file").write_text("")
    r = rollcheck("probe", hostile.url + "/gzip", "-n", "2", "--out", str(tmp_path / "file" / "p"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "cannot write to" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert sum(hostile.requests.values()) == 0


def test_probe_never_writes_the_echoed_key(hostile, tmp_path):
    env = dict(os.environ, HOSTILE_KEY="sk-echoed-0123456789")
    r = rollcheck("probe", hostile.url + "/echo-auth", "-n", "2", "--api-key", "HOSTILE_KEY",
                  "--out", str(tmp_path / "p"), env=env)  # fmt: skip
    assert r.returncode == 1  # error events
    assert rollcheck("report", str(tmp_path / "p")).returncode == 0
    for f in (tmp_path / "p").iterdir():
        assert "sk-echoed-0123456789" not in f.read_text(), f.name


def test_probe_and_load_folders_make_reports(sim_factory, tmp_path):
    sim = sim_factory(itl_s=0.005)
    assert rollcheck("probe", sim.url, "-n", "3", "--out", str(tmp_path / "p")).returncode == 0
    r = rollcheck("report", str(tmp_path / "p"))
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "p" / "report.html").read_text()
    assert "ttft_s" in page and "complete" in page
    r = rollcheck("load", sim.url, "--duration", "2", "--set", "load.users=2",
                  "--out", str(tmp_path / "l"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = rollcheck("report", str(tmp_path / "l"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "l" / "report.html").stat().st_size > 1000


def test_report_refuses_to_write_through_a_link(sim_factory, tmp_path):
    sim = sim_factory(itl_s=0.005)
    out = tmp_path / "p"
    assert rollcheck("probe", sim.url, "-n", "1", "--out", str(out)).returncode == 0
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (out / "report.html").symlink_to(victim)
    r = rollcheck("report", str(out))
    assert r.returncode == 2 and "symbolic link" in r.stderr and "Traceback" not in r.stderr
    (out / "summary.json").unlink()
    (out / "summary.json").symlink_to(victim)
    r = rollcheck("probe", sim.url, "-n", "1", "--out", str(out))
    assert r.returncode == 2 and "symbolic link" in r.stderr
    assert victim.read_text() == "precious"


def test_load_interrupted_keeps_every_record(sim_factory, tmp_path):
    sim = sim_factory(itl_s=0.02)
    out = tmp_path / "l"
    proc = start("load", sim.url, "--duration", "60", "--set", "load.users=3",
                 "--set", "load.stop_timeout_s=10", "--out", str(out))  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (out / "records.jsonl").exists() and (out / "records.jsonl").stat().st_size > 2000:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    stdout, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    sent = int(re.search(r"(\d+) requests:", stdout).group(1))
    assert sent == len(records_of(out)) > 0


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_up_stops_everything_and_exits_with_the_signal(tmp_path, sig, code):
    sets = [x for s in [*FAST, "replicas=1"] for x in ("--set", s)]
    proc = start("up", *sets, "--run-dir", str(tmp_path / "up"))
    line = ""
    deadline = time.monotonic() + 60
    while "gateway:" not in line and time.monotonic() < deadline:
        line = proc.stdout.readline()
    port = int(re.search(r"127\.0\.0\.1:(\d+)", line).group(1))
    assert _listening(port)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert not _listening(port), "something still answers on the gateway port"


def test_sim_drains_and_exits_at_sighup(sim_factory):
    sim = sim_factory()
    sim.signal(signal.SIGHUP)
    assert sim.exited_within(15)
    assert not _listening(sim.settings.port)


def test_load_against_a_server_of_wrong_types_keeps_a_record_per_request(hostile, tmp_path):
    """One malformed finish_reason lost every record ("sent 434, records 0")."""
    out = tmp_path / "l"
    r = rollcheck("load", hostile.url + "/bad-finish", "--duration", "2",
                  "--set", "load.users=2", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    sent = int(re.search(r"(\d+) requests:", r.stdout).group(1))
    records = records_of(out)
    assert sent == len(records) > 0
    assert {x["outcome"] for x in records} == {"not_sse"}
    assert all("finish_reason is list" in x["error"] for x in records)
