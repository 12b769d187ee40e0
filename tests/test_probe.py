"""`rollcheck probe` against simulators started with each fault mode."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process


def probe(url, *args, env=None):
    cmd = [sys.executable, "-m", "harness.cli", "probe", url, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize(
    "sim_kwargs, outcome",
    [
        ({}, "complete"),
        ({"fault_error_event_rate": 1.0}, "error_event"),
        ({"fault_stall_rate": 1.0}, "hung"),
        ({"fault_http_error_rate": 1.0, "fault_http_status": 429}, "http_error"),
        ({"fault_crash_rate": 1.0}, None),  # first stream resets, the rest cannot connect
    ],
    ids=["healthy", "error_event", "stall", "http_error", "crash"],
)
def test_probe_counts_and_exit_code(sim_factory, tmp_path, sim_kwargs, outcome):
    sim = sim_factory(itl_s=0.01, **sim_kwargs)
    out = tmp_path / "probe"
    result = probe(sim.url, "-n", "6", "-c", "1", "--stall-timeout", "1", "--out", str(out))
    summary = json.loads((out / "summary.json").read_text())
    records = (out / "records.jsonl").read_text().splitlines()
    assert len(records) == summary["requests"] == 6
    assert sum(summary["outcomes"].values()) == 6
    assert set(summary["outcomes"]) >= {"complete", "truncated", "hung", "cancelled"}
    if outcome is None:
        assert summary["outcomes"]["reset"] == 1 and summary["outcomes"]["connect_error"] == 5
    else:
        assert summary["outcomes"][outcome] == 6
    assert result.returncode == (0 if outcome == "complete" else 1), result.stderr
    assert ("verdict pass" if outcome == "complete" else "verdict fail") in result.stdout


def test_probe_ttft_slo_fails_the_run(sim_factory, tmp_path):
    sim = sim_factory(ttft_s=0.3)
    result = probe(sim.url, "-n", "2", "--ttft-slo", "0.1", "--out", str(tmp_path / "p"))
    assert result.returncode == 1
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert summary["flags"]["ttft_slo_breach"] == 2 and summary["outcomes"]["complete"] == 2


def test_probe_api_key_is_sent_but_never_written(sim_factory, tmp_path):
    import os

    sim = sim_factory(api_key="sk-secret-123")  # answers 401 without the key, as vLLM does
    env = dict(os.environ, MY_KEY="sk-secret-123")
    result = probe(sim.url, "-n", "1", "--api-key", "MY_KEY", "--out", str(tmp_path / "p"), env=env)
    assert result.returncode == 0
    for f in (tmp_path / "p").iterdir():
        assert "sk-secret-123" not in f.read_text()
    assert probe(sim.url, "-n", "1", "--out", str(tmp_path / "q")).returncode == 1  # 401s


@pytest.mark.parametrize(
    "args, message",
    [
        (["http://127.0.0.1:1", "-n", "0"], "--requests"),
        (["not-a-url"], "not an http:// or https:// URL"),
        (["http://user:hunter2@127.0.0.1:1"], "carries a user name or password"),
        (["http://127.0.0.1:1", "--api-key", "NO_SUCH_VAR_XYZ"], "not set"),
    ],
)
def test_probe_bad_usage_is_one_line_exit_2(args, message):
    result = probe(*args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "hunter2" not in result.stderr  # a password in the URL is never repeated
