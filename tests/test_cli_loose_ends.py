"""The CLI without loose ends: a path that cannot be written, a full disk behind stdout,
a value out of range, each one line and exit 2 (never the exit code that means a verdict,
never a traceback); percentages for rollout strategies as the Deployment takes them;
help for every option."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def one_line(r: subprocess.CompletedProcess, command: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"rollcheck {command}: "), line
    return line


def session(root: Path, name: str) -> Path:
    import json

    run = root / name / "test_drain_pod"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(
        json.dumps({"scenario": "drain", "name": "test_drain[pod]", "verdict": "pass",
                    "requests": 1, "outcomes": {"complete": 1}, "checks": []})
    )  # fmt: skip
    return root / name


@pytest.mark.process
def test_an_unwritable_out_is_one_line_and_exit_2_never_a_verdicts_code(tmp_path):
    a = session(tmp_path / "r", "20261201-020000-kube")
    b = session(tmp_path / "r", "20261202-020000-kube")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for args, command in [
        (["report", "--compare", str(a), str(b), "--out", str(blocker / "c.html")], "report"),
        (["report", "--history", str(tmp_path / "r"), "--out", "/proc/h.html"], "report"),
        (["canary", "--baseline", "http://127.0.0.1:9", "--candidate", "http://127.0.0.1:9",
          "--out", "/proc/rollcheck-canary"], "canary"),
    ]:  # fmt: skip
        line = one_line(cli(*args), command)
        assert "/proc" in line or str(blocker) in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "r"]


@pytest.mark.process
def test_a_full_disk_behind_stdout_is_one_line():
    with open("/dev/full", "w") as full:
        r = cli("lint", str(ROOT / "deploy" / "vllm"), stdout=full)
    line = one_line(r, "lint")
    assert "No space left on device" in line


@pytest.mark.process
@pytest.mark.parametrize(
    "args, command, said",
    [
        (["sim", "--port", "99999"], "sim", "port must be between 1 and 65535, not 99999"),
        (["kube-local", "--nodes", "0"], "kube-local", "--nodes must be between 1 and 8, not 0"),
    ],
)
def test_values_out_of_range_are_refused(args, command, said):
    assert said in one_line(cli(*args), command)


@pytest.mark.process
@pytest.mark.parametrize(
    "args, command, said",
    [
        (["load", "http://me:hunter2@127.0.0.1:9"], "load", "the URL: carries a user name"),
        (["load", "127.0.0.1:9"], "load", "the URL: '127.0.0.1:9' is not an http:// or"),
        (["canary", "--baseline", "http://127.0.0.1:9", "--candidate", "https://:hunter2@c"],
         "canary", "--candidate: carries a user name or password"),
        (["canary", "--baseline", "http://127.0.0.1:99999", "--candidate", "http://c"],
         "canary", "--baseline: is not a URL rollcheck can read"),
        (["sim", "--pd-role", "decode", "--pd-prefill-url", "http://u:hunter2@p"], "sim",
         "pd_prefill_url: carries a user name"),
    ],
)  # fmt: skip
def test_a_url_is_checked_before_anything_is_sent_and_a_password_never_repeated(
    args, command, said
):
    """A URL is printed and written with the run: one carrying a password is refused (the
    key comes from an environment variable), and the password is not in the error."""
    line = one_line(cli(*args), command)
    assert said in line and "hunter2" not in line, line


@pytest.mark.process
def test_plan_takes_percentages_as_the_deployment_controller_rounds_them():
    r = cli("plan", "--replicas", "10", "--max-surge", "25%", "--max-unavailable", "25%")
    assert r.returncode == 0, r.stderr
    row = r.stdout.strip().splitlines()[-1].split()
    assert row[:2] == ["3", "2"]  # 2.5 surge rounds up, 2.5 unavailable down
    bad = cli("plan", "--max-surge", "lots")
    assert "max_surge" in one_line(bad, "plan")


@pytest.mark.unit
def test_every_option_of_every_command_has_help():
    parser = build_parser()
    missing = []
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        for action in p._actions:
            if isinstance(action, argparse._HelpAction) or not action.option_strings:
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{name} {'/'.join(action.option_strings)}")
    assert missing == []
