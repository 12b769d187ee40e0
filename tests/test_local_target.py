"""The local target against Kubernetes' rules: real processes, real nginx, loopback."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from harness.cluster.local import EvictionRefused, LocalTarget
from harness.cluster.local.nginx import Nginx
from harness.cluster.target import TargetError
from harness.config.schema import load_config
from harness.gateway_logs import read_access_log
from harness.proc import free_port

pytestmark = pytest.mark.process

FAST = [
    "engine.startup_s=0",
    "pod.prestop_s=0.3",
    "pod.termination_grace_s=5",
    "gateway.endpoint_delay_s=0.2",
    "engine.shutdown_timeout_s=3",
    "pdb.min_available=null",
]


@pytest.fixture
def target_factory(tmp_path):
    made: list[LocalTarget] = []

    def make(*sets: str, replicas: int = 2) -> LocalTarget:
        cfg = load_config(None, [*FAST, f"replicas={replicas}", *sets])
        t = LocalTarget(cfg, tmp_path / f"t{len(made)}")
        made.append(t)
        t.start()
        t.wait_settled(replicas, 30)
        return t

    yield make
    pids = []
    for t in made:
        pids += [e.detail["pid"] for e in t.events() if e.kind == "container_started"]
        t.close()
    for pid in pids:  # nothing left running
        assert (
            not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
        )


def chat(
    url: str, max_tokens: int = 4, rid: str | None = None, ignore_eos: bool = False
) -> httpx.Response:
    headers = {"X-Request-Id": rid} if rid else {}
    return httpx.post(
        url + "/v1/chat/completions",
        headers=headers,
        timeout=30,
        json={
            "messages": [{"role": "user", "content": "x"}],
            "stream": True,
            "max_tokens": max_tokens,
            "ignore_eos": ignore_eos,
        },
    )


def kinds(target, pod: str) -> list[str]:
    return [e.kind for e in target.events() if e.pod == pod]


def first(target, kind: str, pod: str | None = None, timeout_s: float = 5) -> float:
    """Time of the first such event, waiting for it (the controller acts on its next tick)."""

    def times():
        return [e.t for e in target.events() if e.kind == kind and (pod is None or e.pod == pod)]

    target.wait_for(lambda: times(), timeout_s, f"a {kind} event")
    return times()[0]


def test_readiness_gating_keeps_traffic_off_a_starting_pod(target_factory):
    t = target_factory("engine.startup_s=2", replicas=1)
    t.scale(2)
    results = [chat(t.gateway_url).status_code for _ in range(15)]  # during the new pod's startup
    assert results == [200] * 15
    t.wait_settled(2, 30)
    starting = next(p for p in t.pods() if p.name.endswith("-2"))
    ready_at = next(
        e.t
        for e in t.events()
        if e.kind == "gateway_updated" and starting.address in e.detail["endpoints"]
    )
    assert ready_at > first(t, "ready", starting.name)
    access, _ = read_access_log(t.gateway_logs()[0])
    early = [a for a in access if a.upstream_addr == starting.address and a.end_t < ready_at]
    assert early == []


def test_gateway_learns_of_removal_only_after_the_delay(target_factory):
    # 1.8 s of requests before the gateway learns: enough of them, on a busy machine too,
    # that round robin surely sends some to the removed pod
    t = target_factory("gateway.endpoint_delay_s=2.0", "pod.prestop_s=3", replicas=2)
    victim = t.pods()[0]
    t.evict_pod(victim.name)
    removed = first(t, "endpoint_removed", victim.name)
    deadline = removed + 1.8
    rids = []
    while time.time() < deadline:
        rid = f"probe-{len(rids)}"
        rids.append(rid)
        assert chat(t.gateway_url, rid=rid).status_code == 200
    t.wait_pod_gone(victim.name, 30)
    updated = [e.t for e in t.events() if e.kind == "gateway_updated" and e.t > removed]
    assert updated and updated[0] - removed >= 1.9
    access, _ = read_access_log(t.gateway_logs()[0])
    to_victim = [a for a in access if a.request_id in rids and a.upstream_addr == victim.address]
    assert to_victim, "the gateway kept routing to the pod until it learned of the removal"


def test_a_request_right_after_an_endpoint_change_uses_the_new_routes(sim_factory, tmp_path):
    # A reload starts new workers before the old ones stop accepting: the gateway
    # counts a change applied only once no old worker can take a new connection.
    a, b = sim_factory(model_version="route-a"), sim_factory(model_version="route-b")
    gw = Nginx(tmp_path, free_port(), endpoint_delay_s=0, read_timeout_s=30)
    gw.start()
    try:
        wrong = []
        for i in range(12):
            want = a if i % 2 == 0 else b
            gw.set_endpoints([f"127.0.0.1:{want.settings.port}"])
            deadline = time.monotonic() + 10
            while gw.applied != (f"127.0.0.1:{want.settings.port}",):
                assert time.monotonic() < deadline, f"switch {i} was never applied"
                time.sleep(0.001)
            got = httpx.get(gw.url + "/version", timeout=10)
            expected = f"rollcheck-sim {want.settings.model_version}"
            if got.status_code != 200 or got.json()["version"] != expected:
                wrong.append((i, got.status_code, got.text))
        assert wrong == []
    finally:
        gw.stop()


def test_prestop_sigterm_and_sigkill_at_the_grace_deadline(target_factory):
    t = target_factory(
        # an engine that outlives its grace period: vLLM's teardown after a drain, long
        "engine.shutdown_timeout_s=1",
        "engine.shutdown_teardown_s=30",
        "pod.prestop_s=0.5",
        "pod.termination_grace_s=2",
        replicas=1,
    )
    pod = t.pods()[0].name
    t.delete_pod(pod)
    t.wait_pod_gone(pod, 20)
    start = first(t, "terminating", pod)
    assert first(t, "prestop_started", pod) - start < 0.3  # the pod thread wakes on its tick
    assert 0.45 < first(t, "sigterm", pod) - start < 0.8
    assert 1.95 < first(t, "sigkill", pod) - start < 2.4  # hang mode never exits by itself
    lifecycle = [
        "deleted",
        "terminating",
        "prestop_started",
        "sigterm",
        "sigkill",
        "exited",
        "pod_removed",
    ]
    assert [k for k in kinds(t, pod) if k in lifecycle] == lifecycle


@pytest.mark.parametrize(
    "surge, unavailable, gpu_bound",
    [("1", "0", False), ("2", "1", False), ("3", "0", False), ("1", "0", True)],
    ids=["1-0", "2-1", "blue-green", "1-0-gpu-bound"],
)
def test_rollout_respects_surge_and_unavailable(target_factory, surge, unavailable, gpu_bound):
    t = target_factory(f"strategy.gpu_bound={str(gpu_bound).lower()}", replicas=3)
    t.rollout("v2", max_surge=surge, max_unavailable=unavailable)
    t.wait_for(t.rollout_done, 60, "the rollout")
    t.wait_settled(3, 30)
    assert {p.version for p in t.pods()} == {"v2"}
    start = first(t, "rollout_started")
    caps = [e.detail for e in t.events() if e.kind == "capacity" and e.t >= start]
    assert caps, "capacity was recorded"
    assert min(c["available"] for c in caps) >= 3 - int(unavailable)
    if gpu_bound:  # a terminating pod keeps its GPU: never more than replicas + surge pods
        assert max(c["pods"] for c in caps) <= 3 + int(surge)


def test_eviction_refused_by_the_pdb_then_retried(target_factory):
    t = target_factory("pdb.min_available=2", replicas=2)
    victim = t.pods()[0].name
    with pytest.raises(EvictionRefused):
        t.evict_pod(victim)
    assert "eviction_refused" in kinds(t, victim)
    threading.Timer(0.5, t.scale, args=(3,)).start()  # capacity arrives while we retry
    t.evict_pod(victim, retry_deadline_s=20)
    assert "evicted" in kinds(t, victim)


def test_drain_node_evicts_its_pods_and_cordons(target_factory):
    t = target_factory(replicas=2)
    node = t.pods()[0].node
    victims = t.drain_node(node)
    assert victims
    t.wait_settled(2, 30)
    assert all(p.node != node for p in t.pods())


def test_scale_to_zero_and_back(target_factory):
    t = target_factory(replicas=2)
    t.scale(0)
    t.wait_for(lambda: not t.pods(), 20, "no pods")
    t.wait_for(lambda: chat(t.gateway_url).status_code == 503, 5, "the gateway to answer 503")
    t.scale(2)
    t.wait_settled(2, 30)
    assert chat(t.gateway_url).status_code == 200


def test_killed_container_is_restarted(target_factory):
    t = target_factory(replicas=1)
    pod = t.pods()[0].name
    t.kill_pod(pod, signal.SIGKILL)
    t.wait_for(lambda: t.pods()[0].restarts == 1 and t.pods()[0].ready, 20, "a restart")
    assert kinds(t, pod).count("container_started") == 2
    assert "exited" in kinds(t, pod) and "unready" in kinds(t, pod)


def test_each_restart_of_a_crash_looping_container_waits_twice_as_long(target_factory):
    """CrashLoopBackOff as the kubelet does it: a container that keeps dying waits
    restart_backoff_s before its first restart, then twice as long each time, and the
    wait is on the timeline (as a cluster's pod status shows it)."""
    t = target_factory("pod.restart_backoff_s=0.3", replicas=1)
    pod = t.pods()[0].name
    for n in (1, 2, 3):
        t.kill_pod(pod, signal.SIGKILL)
        t.wait_for(lambda n=n: t.pods()[0].restarts == n and t.pods()[0].ready, 20, "a restart")
    events = [e for e in t.events() if e.pod == pod]
    waits = [e.detail["delay_s"] for e in events if e.kind == "back_off"]
    assert waits == [0.3, 0.6, 1.2]
    exits = [e.t for e in events if e.kind == "exited"]
    starts = [e.t for e in events if e.kind == "container_started"][1:]
    assert all(s - x >= w for x, s, w in zip(exits, starts, waits, strict=True)), (exits, starts)


def test_liveness_failure_restarts_a_frozen_engine(target_factory):
    t = target_factory(
        "pod.liveness_probe.period_s=0.2",
        "pod.liveness_probe.timeout_s=0.2",
        "pod.termination_grace_s=0.5",
        replicas=1,
    )
    pod = t.pods()[0].name
    t.kill_pod(pod, signal.SIGSTOP)  # alive but not answering
    t.wait_for(lambda: t.pods()[0].restarts >= 1, 20, "a liveness restart")
    assert any(e.kind == "probe_failed" and e.detail["probe"] == "liveness" for e in t.events())


def test_up_rejects_a_bad_setting_in_one_line(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "up",
            "--set",
            "engine.ttft=1",
            "--run-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert "unknown setting 'engine.ttft'" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_rollout_with_a_bad_engine_setting_is_refused(target_factory):
    t = target_factory(replicas=1)
    with pytest.raises(TargetError, match="engine"):
        t.rollout("v2", engine={"shutdown_mode": "explode"})


def test_a_killed_harness_leaves_nothing_after_the_next_start(tmp_path):
    """The harness dies with SIGKILL: its pods die with it, and the next start reaps nginx."""
    script = (
        "import sys, time\n"
        "from harness.config.schema import load_config\n"
        "from harness.cluster.local import LocalTarget\n"
        f"t = LocalTarget(load_config(None, {FAST + ['replicas=1']!r}), sys.argv[1])\n"
        "t.start(); t.wait_settled(1, 30)\n"
        "sims = [p.proc.pid for p in t.controller.pods.values()]\n"
        "print(t.gateway.proc.pid, *sims, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "dead")], stdout=subprocess.PIPE, text=True
    )
    nginx_group, *sims = map(int, proc.stdout.readline().split())
    assert sims and all(b"harness.cli sim" in _cmdline(str(p)) for p in sims)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10

    def sims_alive():
        return [p for p in sims if b"harness.cli sim" in _cmdline(str(p))]

    while time.monotonic() < deadline and (_group_alive(nginx_group) or sims_alive()):
        from harness.proc import reap_leftovers

        reap_leftovers()  # what the next LocalTarget.start() does first
        time.sleep(0.2)
    assert not _group_alive(nginx_group)
    # the pods' simulators died with the harness (each in its own group, by their pids)
    assert not sims_alive()


def _group_alive(pgid: int) -> bool:
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid and fields[0] != "Z":
                    return True
            except OSError:
                pass
    return False


def _cmdline(pid: str) -> bytes:
    """A process's arguments joined by spaces (/proc separates them with NULs)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ")
    except OSError:
        return b""


def test_engines_behind_a_gate_of_one_slot_start_one_after_the_other(tmp_path):
    """A busy machine's real engines start one at a time: the second pod's container waits
    (Pending, a waiting_to_start event) until the first has started."""
    from harness.cluster.local.kubelet import PodRunner, PodSpec
    from harness.config.schema import PodSettings, Probe
    from harness.engines.startup import StartGate
    from harness.events import EventLog
    from harness.proc import sim_command
    from harness.sim.settings import SimSettings

    log = EventLog(tmp_path / "events.jsonl")
    gate = StartGate(1)
    settings = PodSettings(startup_probe=Probe(0.1, 600), liveness_probe=None)
    pods = []
    for i in (1, 2):
        port = free_port()
        engine = SimSettings(port=port, startup_s=1.0)
        spec = PodSpec(f"p{i}", "v1", "n", "127.0.0.1", port, sim_command(engine), settings)
        pods.append(PodRunner(spec, log.emit, tmp_path, start_gate=gate))
    try:
        for p in pods:
            p.start()
        deadline = time.monotonic() + 20
        while not all(p.started for p in pods) and time.monotonic() < deadline:
            time.sleep(0.05)
        at = {(e.pod, e.kind): e.t for e in log.all()}
        assert all(p.started for p in pods), at
        first, second = sorted(("p1", "p2"), key=lambda n: at[(n, "container_started")])
        assert (second, "waiting_to_start") in at
        assert at[(second, "container_started")] >= at[(first, "started")]
    finally:
        for p in pods:
            p.delete(grace_s=0)
        for p in pods:
            p.done.wait(10)
        log.close()


def test_a_start_that_stops_progressing_fails_the_settle_early(target_factory):
    """With a stall bound, settling follows the starting engines' logs: an engine silent
    for longer fails the wait then, not at the far ceiling, and says so."""
    t = target_factory(replicas=1)
    t.scale(0)
    t.wait_settled(0, 20)
    t.controller.template = dataclasses.replace(
        t.controller.template,
        engine=dataclasses.replace(t.controller.template.engine, startup_s=30),
    )
    t.scale(1)
    t0 = time.monotonic()
    with pytest.raises(TargetError, match="without progress") as e:
        t.wait_settled(1, timeout_s=60, stall_s=1.0)
    assert time.monotonic() - t0 < 10
    assert "load average" in str(e.value) and "log ends" in str(e.value)  # how it stood


def test_engines_are_warmed_directly_before_the_steady_state(target_factory):
    """Each pod answers the warm-up itself, to prompts as long as the load's longest (a
    CPU engine warmed with short prompts is slow again at its first long prefill)."""
    t = target_factory(replicas=2)
    t.warm_engines(2, None, 600)
    warmed = [e for e in t.events() if e.kind == "action" and e.detail["action"] == "warmed"]
    assert sorted(e.pod for e in warmed) == sorted(p.name for p in t.pods())
    for e in warmed:
        assert e.detail["outcomes"] == ["complete", "complete"] and len(e.detail["ttft_s"]) == 2
        assert all(n > 300 for n in e.detail["prompt_tokens"]), e.detail  # not "count to ten"
    access, _ = read_access_log(t.gateway_logs()[0])
    # to each pod directly, not through the gateway (which saw only the settle's polls)
    assert [a for a in access if a.request_id] == []


def test_a_load_step_is_watched_until_the_replicas_queues_clear(target_factory, tmp_path):
    """After a load step, the scale_up scenario keeps the load on until no replica has a
    request waiting for a slot, as the replicas' own gauges say: the old replica's queue
    drains only as its answers end, and a run that ends before then is judged on a TTFT
    still over its SLO (CI: the queue cleared 10.9 s after a step, the run ended at 8.8 s)."""
    from harness.scenario import Scenario

    t = target_factory("engine.max_num_seqs=1", "engine.itl_s=0.02", replicas=1)
    pod = t.ready_pods()[0].name
    scenario = Scenario("s", "scale_up", t.cfg, t, tmp_path / "run")
    scenario.disruption.t_step = time.time()
    done = []  # (when, response)

    def answer():
        r = chat(t.gateway_url, 100, ignore_eos=True)
        done.append((time.monotonic(), r))

    answers = [threading.Thread(target=answer) for _ in range(3)]
    for a in answers:  # 2 s each, one at a time: the third has a slot when the second ends
        a.start()
    deadline = time.monotonic() + 5
    while t.pod_metrics(pod).get("vllm:num_requests_waiting") != 2:
        assert time.monotonic() < deadline, t.pod_metrics(pod)
        time.sleep(0.02)
    scenario.recovery.wait_queues_clear()
    cleared = time.monotonic()
    assert t.pod_metrics(pod)["vllm:num_requests_waiting"] == 0
    # not before the second answer ran its 2 s after the first, nor after the third's end
    assert len(done) < 3 and done and cleared > done[0][0] + 1.0, (cleared, done)
    assert [e for e in t.events() if e.kind == "action" and e.detail["action"] == "queues_clear"]
    for a in answers:
        a.join()
    assert [r.status_code for _, r in done] == [200, 200, 200]


def test_a_queue_that_outlasts_the_recovery_bound_is_left_to_the_judge(target_factory, tmp_path):
    from harness.scenario import Scenario

    t = target_factory(
        "engine.max_num_seqs=1", "engine.itl_s=0.02", "scenario.recovery_s=1", replicas=1
    )
    pod = t.ready_pods()[0].name
    scenario = Scenario("s", "scale_up", t.cfg, t, tmp_path / "run")
    answers = [  # 4 s each: the queue clears after 4 s
        threading.Thread(target=chat, args=(t.gateway_url, 200, None, True)) for _ in range(2)
    ]
    for a in answers:
        a.start()
    deadline = time.monotonic() + 5
    while t.pod_metrics(pod).get("vllm:num_requests_waiting") != 1:
        assert time.monotonic() < deadline, t.pod_metrics(pod)
        time.sleep(0.02)
    scenario.disruption.t_step = time.time()
    t0 = time.monotonic()
    scenario.recovery.wait_queues_clear()  # the bound counts from the step
    assert 0.8 < time.monotonic() - t0 < 3.5
    assert t.pod_metrics(pod)["vllm:num_requests_waiting"] == 1
    assert not [
        e for e in t.events() if e.kind == "action" and e.detail["action"] == "queues_clear"
    ]
    for a in answers:
        a.join()


def test_the_pods_judged_as_the_candidate_are_the_ones_its_rollout_made(target_factory, tmp_path):
    """A canary found by its version label alone was the baseline when the two shared a
    version: the candidate's pods are the ones created after the rollout."""
    from harness.scenario import Scenario

    t = target_factory(replicas=2)
    scenario = Scenario("s", "rollout", t.cfg, t, tmp_path / "run")
    t.action("steady_state")
    before = t.ready_pods()
    assert scenario.versions.new_pods("v1", before) == []  # no rollout yet: nothing is new
    t.rollout("v2", max_surge="1", max_unavailable="0")
    t.wait_settled(2, 30)
    after = t.ready_pods()
    assert sorted(p.name for p in scenario.versions.new_pods("v2", after)) == sorted(
        p.name for p in after
    )
    assert not {p.name for p in before} & {p.name for p in after}
    with pytest.raises(Exception, match="the baseline's version"):
        scenario.versions.require_candidate("v1", {}, "canary.version")
    scenario.versions.require_candidate("v3")  # a new version: no error


def test_the_gateway_names_each_streams_pod_while_it_streams(target_factory, tmp_path):
    """rollcheck's nginx names the serving pod at a stream's first byte, so the load's
    live status says which pod holds which stream and, at the stream's own pace, when it
    should end: a drain picks its victim by that (scenario.disruption.busiest_pod(past_prestop=True))."""
    from harness.config.load import LoadSettings, Share
    from harness.load import LoadRun
    from harness.streams import Thresholds

    t = target_factory(replicas=2)
    # 150-token answers at the simulator's 20 ms a token: about 3 s each
    s = LoadSettings(users=4, max_tokens=[Share(150)], stop_timeout_s=5)
    run = LoadRun(t.gateway_url, tmp_path / "run", s, Thresholds(5))
    seen: dict[str, tuple[str, float]] = {}  # request id -> (pod address, expected end)
    with run:
        run.wait_until_in_flight(4)
        deadline = time.monotonic() + 20
        while len(seen) < 8 and time.monotonic() < deadline:
            status = run.status()
            for st in status.streams if status else []:
                if st.get("ends_at") and st["request_id"] not in seen:
                    seen[st["request_id"]] = (st["upstream"], st["ends_at"])
            time.sleep(0.1)
        later = run.outlasting(time.time() + 60)
    addresses = {p.address for p in t.pods()}
    assert len(seen) >= 8 and {a for a, _ in seen.values()} <= addresses, seen
    assert later == set()  # no 3 s answer streams a minute from now
    records = {r.request_id: r for r in run.result.records}
    access, _ = read_access_log(t.gateway_logs()[0])
    logged = {a.request_id: a.upstream_addr for a in access}
    for rid, (address, ends_at) in seen.items():
        r = records[rid]
        assert r.outcome == "complete"
        assert address == logged[rid]  # the pod it named is the one the gateway's log says
        # the expected end is the stream's own pace carried on: after its send, and before
        # it ended plus its own length again (a slowed machine only ends it later)
        assert r.sent_at < ends_at < r.sent_at + 2 * r.duration_s + 1, (ends_at, r)


@pytest.mark.parametrize("decision", ["promote", "rollback"])
def test_a_canary_holds_at_one_candidate_pod_until_judged(target_factory, decision):
    """start_canary makes one candidate beside the baseline and the rollout holds there
    (it went on to every replica within about 2 s before, before any answer was
    compared); promote lets it go on, rollback gives the baseline's template back."""
    t = target_factory(replicas=3)
    t.start_canary("v2")
    t.wait_for(lambda: [p for p in t.ready_pods() if p.version == "v2"], 30, "the candidate")
    time.sleep(3)  # a rollout that was not held would have replaced a baseline pod by now
    versions = sorted(p.version for p in t.pods() if not p.terminating)
    assert versions == ["v1", "v1", "v1", "v2"], versions
    assert not t.rollout_done()
    if decision == "promote":
        t.promote_canary()
        t.wait_for(t.rollout_done, 60, "the rollout")
        t.wait_settled(3, 30)
        assert {p.version for p in t.pods()} == {"v2"}
    else:
        t.rollback_canary()
        t.wait_for(t.rollout_done, 60, "the rollback")
        t.wait_settled(3, 30)
        assert {p.version for p in t.pods()} == {"v1"}


@pytest.mark.parametrize("balance", ["round_robin", "least_conn"])
def test_least_conn_sends_new_requests_to_the_replica_with_fewer_streams_open(
    target_factory, balance
):
    """With one long answer open on a replica, each new request goes to the other under
    least_conn (the fewest streams open); round_robin goes on alternating, busy or not."""
    from harness.client import UPSTREAM_HEADER

    t = target_factory(f"gateway.balance={balance}", replicas=2)
    body = {"messages": [{"role": "user", "content": "x"}], "stream": True,
            "max_tokens": 500, "ignore_eos": True}  # fmt: skip
    with httpx.stream("POST", t.gateway_url + "/v1/chat/completions", json=body, timeout=30) as r:
        busy = r.headers[UPSTREAM_HEADER]
        chosen = [chat(t.gateway_url).headers[UPSTREAM_HEADER] for _ in range(6)]
    if balance == "least_conn":
        assert busy not in chosen and len(set(chosen)) == 1, (busy, chosen)
    else:
        assert chosen.count(busy) >= 2, (busy, chosen)
