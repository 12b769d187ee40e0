"""load.workers: auto. How many workers a load needs, from its events/s and a worker's
budget on this machine: literal budgets for the arithmetic (unit), a real measurement and
a real load that starts more than one worker and loses no request (process)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from harness import load_sizing as LS
from harness.config import ConfigError, build
from harness.config.load import LoadSettings, Share


def never():
    raise AssertionError("a small load must not wait for a measurement")


@pytest.mark.unit
def test_a_small_load_is_one_process_without_measuring():
    s = LS.size(LoadSettings(users=8), 50.0, "the simulator's", True, never)
    assert s.workers == 0 and "about 400 events/s" in s.why and "one Locust process" in s.why


@pytest.mark.unit
def test_a_load_past_a_workers_budget_gets_the_workers_it_needs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    load = LoadSettings(users=300)  # 300 x 50 tokens/s = 15,000 events/s
    s = LS.size(load, None, "", local_target=True, measure=lambda: 4000.0)
    assert s.workers == 4, s.why  # 15,000 / 4,000, rounded up
    assert "assumed (a fast GPU engine's 20 ms" in s.why and "measured now" in s.why
    # cached: the next session reads it, and measures nothing
    again = LS.size(load, None, "", local_target=True, measure=never)
    assert again.workers == 4 and "measured on this machine before" in again.why
    # the cores cap it: 16 less one for the local engines, or the load's own cpus
    many = LS.size(LoadSettings(users=3000), None, "", local_target=True, measure=never)
    assert many.workers == 15 and "not the 38 it needs" in many.why
    pinned = LoadSettings(users=3000, cpus=[2, 3])
    assert LS.size(pinned, None, "", local_target=True, measure=never).workers == 2
    # a rate load asks for its arrivals' tokens: 20 requests/s of 500 tokens
    rate = LoadSettings(shape="rate", rate_rps=20, max_tokens=[Share(500)])
    assert LS.size(rate, None, "", local_target=False, measure=never).workers == 3
    # the chart's workers do the reading: no local worker, and the outlook says whether
    # they are enough at the budget measured here
    ext = LoadSettings(users=300, external_workers=4, master_port=5557)
    enough = LS.size(ext, None, "", local_target=False, measure=never)
    assert enough.workers == 0 and "4 external workers (4 would do)" in enough.why
    few = LS.size(dataclasses.replace(ext, external_workers=2), None, "", False, never)
    assert few.workers == 0 and "2 external workers, not the 4 it needs" in few.why
    assert "raise the chart's locust.workers to 4" in few.why


@pytest.mark.unit
def test_a_budget_that_cannot_be_measured_leaves_one_process_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def broken():
        raise RuntimeError("the load read 0 events")

    s = LS.size(LoadSettings(users=300), None, "", local_target=False, measure=broken)
    assert s.workers == 0 and "could not be measured here (RuntimeError" in s.why
    assert "set load.workers" in s.why


@pytest.mark.unit
@pytest.mark.parametrize(
    "value, ok",
    [("auto", True), (3, True), (0, True), ("many", False), (-1, False), (True, False)],
)
def test_workers_is_auto_or_a_count(value, ok):
    if ok:
        assert build(LoadSettings, {"workers": value}, "load").workers == value
    else:
        with pytest.raises(ConfigError, match="workers"):
            build(LoadSettings, {"workers": value}, "load")


@pytest.mark.process
def test_a_workers_budget_is_measured_here_from_a_real_load(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    from harness.load import measure_budget

    each, source = LS.budget(measure_budget)
    # one Locust process at half a core: thousands of events/s on any machine it runs on
    assert 500 < each < 100_000 and source == "measured now, on this machine"
    cached = json.loads((tmp_path / "rollcheck" / "load-budget.json").read_text())
    assert list(cached.values()) == [round(each)]


@pytest.mark.process
def test_auto_starts_the_workers_a_load_needs_and_loses_no_request(sim_factory, tmp_path):
    """`rollcheck load` (the target elsewhere: every core for the load) with 60 streams,
    which it reckons at 50 tokens/s (the engine's pace is not known to it: 3,000 events/s),
    and a budget of 2,000 a worker: two workers, sent = records, and the line that says
    why."""
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        pytest.fail("this test needs two cores: the machine the suite runs on has them")
    (tmp_path / "cache" / "rollcheck").mkdir(parents=True)
    (tmp_path / "cache" / "rollcheck" / "load-budget.json").write_text(
        json.dumps({LS.machine_key(): 2000})
    )
    sim = sim_factory(itl_s=0.005, max_num_seqs=64)
    out = tmp_path / "run"
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    r = subprocess.run(
        [sys.executable, "-m", "harness.cli", "load", sim.url, "--duration", "4",
         "--set", "load.users=60", "--set", "load.max_tokens=[{tokens: 100}]",
         "--out", str(out)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    workers = 2
    assert f"rollcheck: load: {workers} Locust workers" in r.stdout, r.stdout
    assert "about 3,000 events/s" in r.stdout and "a worker reads 2,000 events/s" in r.stdout
    status = json.loads((out / "load" / "status.json").read_text())
    assert len(status["workers"]) == workers
    records = (out / "records.jsonl").read_text().splitlines()
    assert status["sent"] == len(records) > 60
    delay = [json.loads(line) for line in (out / "load" / "client_delay.jsonl").open()]
    assert len({w["worker"] for w in delay}) == workers  # every worker measured itself
    # both of its measures: the timer's lateness, and each piece's wait in its socket
    # (the kernel's receive time to the read), a piece of every answer at least
    for worker in {w["worker"] for w in delay}:
        mine = [w for w in delay if w["worker"] == worker]
        assert sum(sum(w["h"].values()) for w in mine) > 0
        assert sum(sum(w.get("a", {}).values()) for w in mine) >= len(records) / workers / 2
