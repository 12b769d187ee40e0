"""LoadRun against real simulators: records reach the master, nothing is lost."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time

import pytest

from harness.config import ConfigError, build
from harness.config.load import LoadSettings, Share
from harness.load import LoadError, LoadRun
from harness.streams import Thresholds

pytestmark = pytest.mark.process


def settings(**kw) -> LoadSettings:
    base = dict(users=4, max_tokens=[Share(10), Share(300, 0.3)], stop_timeout_s=0.5)
    base.update(kw)
    return LoadSettings(**base)


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_records_reach_the_master_and_long_streams_are_cancelled(sim_factory, tmp_path, workers):
    sim = sim_factory(itl_s=0.02)
    # one answer of 300 tokens (6 s) is always in flight, next to short ones
    s = settings(
        workers=workers, max_tokens=[Share(10)], long_answer_user=True, long_answer_tokens=300
    )
    run = LoadRun(sim.url, tmp_path, s, Thresholds(5))
    with run:
        run.wait_until_sent(12, timeout_s=30)
        run.wait_until_in_flight(2)
        live = run.counts()
        assert live["sent"] >= live["finished"] + live["in_flight"] - 1
    result = run.result
    assert result.problems == []
    assert result.sent == len(result.records) >= 12
    outcomes = {r.outcome for r in result.records}
    assert outcomes <= {"complete", "cancelled"}
    cancelled = [r for r in result.records if r.outcome == "cancelled"]
    # the long answer cannot finish within the 0.5 s stop timeout; short ones do
    assert cancelled and all(r.tags["user"] == "long" for r in cancelled)
    assert len({r.request_id for r in result.records}) == len(result.records)
    assert (tmp_path / "records.jsonl").read_text().count("\n") == result.sent
    assert run.master.poll() is not None and all(w.poll() is not None for w in run.workers)
    # the accounting check holds the records to what the workers counted: one record
    # dropped, or one written twice, fails it (outcomes were once counted from the
    # records themselves, so neither could)
    from harness.checks import check_accounting

    ok = check_accounting(result.sent, result.records, result.outcome_total)
    assert ok.status.value == "pass" and result.outcome_total == result.sent
    dropped = check_accounting(result.sent, result.records[1:], result.outcome_total)
    doubled = check_accounting(
        result.sent, [*result.records, result.records[0]], result.outcome_total
    )
    swapped = check_accounting(
        result.sent, [result.records[0], *result.records[:-1]], result.outcome_total
    )
    for r in (dropped, doubled, swapped):
        assert r.status.value == "fail", r
    assert doubled.observed["dupes"] == 1 and swapped.observed["dupes"] == 1


@pytest.mark.parametrize("workers", [0, 2])
def test_every_stream_sent_before_the_settled_time_has_its_record(sim_factory, tmp_path, workers):
    """A step that counts the streams ended by now counts the faster answers more: the
    settled time is the one before which every stream sent has its record, however long
    it ran (a 300-token answer, 6 s, beside 10-token ones)."""
    sim = sim_factory(itl_s=0.02)
    s = settings(
        workers=workers, max_tokens=[Share(10)], long_answer_user=True, long_answer_tokens=300
    )
    run = LoadRun(sim.url, tmp_path, s, Thresholds(15))
    path = tmp_path / "records.jsonl"
    seen = []  # (when read, the settled time, the request ids written by then)
    with run:
        run.wait_until_sent(12, timeout_s=30)
        deadline = time.time() + 8
        while time.time() < deadline:
            settled = run.settled_at()  # read before the records, as a step reads them
            text = path.read_text() if path.exists() else ""
            ids = {
                json.loads(line)["request_id"] for line in text[: text.rfind("\n") + 1].splitlines()
            }
            seen.append((time.time(), settled, ids))
            time.sleep(0.2)
    records = run.result.records
    assert run.result.problems == []
    for _, settled, ids in seen:
        assert settled is not None
        before = {r.request_id for r in records if r.sent_at < settled}
        assert before <= ids, f"{len(before - ids)} sent before the settled time unrecorded"
    # the long answer in flight held the settled time seconds back, while short answers
    # sent after it had their records
    assert any(now - settled > 1.0 for now, settled, _ in seen)


def test_killed_worker_is_reported(sim_factory, tmp_path):
    sim = sim_factory(itl_s=0.02)
    run = LoadRun(sim.url, tmp_path, settings(workers=2, users=6), Thresholds(5))
    run.start()
    run.wait_until_in_flight(4)
    os.killpg(run.workers[1].pid, signal.SIGKILL)
    result = run.stop()
    assert any("worker-1 exited" in p for p in result.problems)
    assert any(p.startswith("accounting") or "never reported" in p for p in result.problems)
    with pytest.raises(LoadError):
        result.raise_for_accounting()


def test_poisson_rate(sim_factory, tmp_path):
    sim = sim_factory(itl_s=0.001, ttft_s=0.001)
    rate, seconds = 25.0, 8.0
    s = settings(shape="rate", rate_rps=rate, max_tokens=[Share(2)], seed=7)
    run = LoadRun(sim.url, tmp_path, s, Thresholds(5))
    run.start()
    run.wait_until_sent(1)
    first = run.status().time
    import time

    time.sleep(seconds)
    result = run.stop()
    starts = sorted(r.sent_at for r in result.records if r.sent_at <= first + seconds)
    n = len([t for t in starts if t >= first])
    expected = rate * seconds
    assert abs(n - expected) < 4 * expected**0.5, (n, expected)  # 4 sigma for Poisson counts
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    cv = statistics.pstdev(gaps) / statistics.mean(gaps)
    assert 0.7 < cv < 1.3  # exponential gaps (CV 1), not a fixed interval (CV 0)


def test_step_shape_adds_users(sim_factory, tmp_path):
    sim = sim_factory(itl_s=0.05)
    s = settings(shape="step", users=1, step_users=5, step_at_s=1.5, max_tokens=[Share(200)])
    run = LoadRun(sim.url, tmp_path, s, Thresholds(5))
    with run:
        run.wait_until_in_flight(5, timeout_s=20)
    assert max(r.tags["max_tokens"] for r in run.result.records) == 200


def test_unreachable_target_and_404_path(sim_factory, tmp_path):
    run = LoadRun("http://127.0.0.1:9", tmp_path, settings(), Thresholds(5))
    with pytest.raises(LoadError, match="unreachable"):
        run.preflight()
    sim = sim_factory()
    run = LoadRun(sim.url, tmp_path, settings(path="/v2/chat"), Thresholds(5))
    with pytest.raises(LoadError, match="404"):
        run.preflight()


def test_answers_longer_than_the_models_context_are_refused_before_the_load(sim_factory, tmp_path):
    """The engine reports its max_model_len in /v1/models (vLLM does): an answer that
    cannot fit is one line before any request, not a 400 on every one of them."""
    sim = sim_factory(max_model_len=1000)
    fits = settings(max_tokens=[Share(900)], prompt_tokens=[Share(64)])
    LoadRun(sim.url, tmp_path, fits, Thresholds(5)).preflight()
    too_long = settings(max_tokens=[Share(30), Share(980, 0.1)], prompt_tokens=[Share(64)])
    with pytest.raises(LoadError) as e:
        LoadRun(sim.url, tmp_path, too_long, Thresholds(5)).preflight()
    assert "load.max_tokens asks for answers of 980 tokens" in str(e.value)
    assert "max_model_len is 1000" in str(e.value) and "at most 936" in str(e.value)
    long_user = settings(long_answer_user=True, long_answer_tokens=5000)
    with pytest.raises(LoadError, match="load.long_answer_tokens asks for answers of 5000"):
        LoadRun(sim.url, tmp_path, long_user, Thresholds(5)).preflight()


@pytest.mark.parametrize(
    "data, message",
    [
        ({"userz": 3}, "unknown setting 'load.userz'"),
        ({"users": -1}, "users cannot be negative"),
        ({"shape": "wave"}, "shape must be one of"),
        ({"think_time_s": -2}, "cannot be negative"),
    ],
)
def test_bad_load_config(data, message):
    with pytest.raises(ConfigError, match=message):
        build(LoadSettings, data, "load")


def test_cli_bad_input_is_one_line_and_leaves_no_process(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("load:\n  users: -3\n")
    for args in (["--config", str(cfg)], ["--set", "load.nope=1"], []):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "harness.cli",
                "load",
                "http://127.0.0.1:9",
                *args,
                "--out",
                str(tmp_path / "o"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "o" / "load" / "master.log").exists()


def load_cli(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "load", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.parametrize(
    "slo, message",
    [
        ("slo: 5", "slo: must be a mapping"),
        ("slo: {ttft: 1}", "unknown setting 'slo.ttft'"),
        ("slo: {ttft_s: soon}", "slo.ttft_s must be a positive number of seconds"),
    ],
)
def test_a_bad_slo_section_is_one_line(tmp_path, slo, message):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(slo + "\n")
    r = load_cli("http://127.0.0.1:9", "--config", cfg, "--out", tmp_path / "o")
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_the_api_key_goes_on_every_request_and_into_no_file(sim_factory, tmp_path):
    import os

    sim = sim_factory(api_key="sk-load-456", itl_s=0.002)
    env = dict(os.environ, LOAD_KEY="sk-load-456")
    out = tmp_path / "with-key"
    r = load_cli(sim.url, "--api-key", "LOAD_KEY", "--duration", "2", "--set", "load.users=2",
                 "--set", "load.workers=1", "--out", out, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert records and all(rec["outcome"] == "complete" for rec in records)  # no 401 among them
    for f in out.rglob("*"):
        if f.is_file():
            assert "sk-load-456" not in f.read_text(errors="replace"), f
    r = load_cli(sim.url, "--duration", "1", "--out", tmp_path / "no-key")
    assert r.returncode == 2 and "answers 401" in r.stderr and "load.api_key_env" in r.stderr
    r = load_cli(sim.url, "--api-key", "NO_SUCH_KEY_VAR", "--out", tmp_path / "unset")
    assert r.returncode == 2 and "$NO_SUCH_KEY_VAR, which is not set" in r.stderr


def test_external_workers_connect_through_the_configured_address_and_ship_every_record(
    sim_factory, tmp_path
):
    """Workers started as the chart's workers starts them: their own processes, no runtime file,
    another folder; the master sends them the run's settings when they connect."""
    from harness.load import LOCUSTFILE
    from harness.proc import free_port

    sim = sim_factory(itl_s=0.01)
    port = free_port()
    s = settings(external_workers=2, master_port=port, max_tokens=[Share(10)], users=4)
    with pytest.raises(ConfigError, match="master_port"):
        LoadRun(sim.url, tmp_path / "x", settings(external_workers=1), Thresholds(5))
    run = LoadRun(sim.url, tmp_path / "run", s, Thresholds(5))
    run.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLCHECK_")}
    cmd = [sys.executable, "-m", "locust", "--worker", "-f", str(LOCUSTFILE)]
    cmd += ["--master-host", "127.0.0.1", "--master-port", str(port), "--loglevel", "WARNING"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    workers = [
        subprocess.Popen(cmd, cwd=elsewhere, env=env, start_new_session=True) for _ in range(2)
    ]
    try:
        run.wait_until_sent(20, timeout_s=60)
        result = run.stop()
        for w in workers:
            w.wait(30)  # a worker leaves with its master
    finally:
        for w in workers:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGKILL)
    assert result.problems == []
    assert result.sent == len(result.records) >= 20
    assert {r.outcome for r in result.records} == {"complete"}
    shipped_by = {w["pid"] for w in run.status().workers.values() if w["sent"]}
    assert shipped_by == {w.pid for w in workers}
    assert not list(elsewhere.iterdir())  # a worker writes nothing of its own


@pytest.mark.parametrize("workers", [0, 2])
def test_a_new_model_mix_reaches_every_worker_while_the_load_runs(sim_factory, tmp_path, workers):
    """load.models, then LoadRun.set_models: every request names a model drawn from the
    mix in force when it was sent; set_models returns once every worker has the new
    mix, and no request sent after it names a model the mix no longer has."""
    import httpx

    from harness.config.load import ModelShare

    sim = sim_factory(itl_s=0.01, runtime_lora=True)
    for name in ("a-v1", "a-v2"):
        body = {"lora_name": name, "lora_path": f"/a/{name}"}
        assert httpx.post(sim.url + "/v1/load_lora_adapter", json=body).status_code == 200
    s = settings(workers=workers, max_tokens=[Share(5)], models=[ModelShare("a-v1", 1.0)])
    run = LoadRun(sim.url, tmp_path, s, Thresholds(5))
    with run:
        run.wait_until_sent(10, timeout_s=30)
        asked = time.time()
        switched = run.set_models([ModelShare("a-v2", 0.5)])
        sent = run.counts()["sent"]
        run.wait_until_sent(sent + 30, timeout_s=30)
    records = run.result.records
    assert {r.outcome for r in records} <= {"complete", "cancelled"}
    assert all(r.tags["model"] == (r.model if r.model != "rollcheck-sim" else "") for r in records)
    before = {r.tags["model"] for r in records if r.sent_at < asked}
    after = {r.tags["model"] for r in records if r.sent_at > switched}
    assert before == {"a-v1"} and after == {"a-v2", ""}, (before, after)
