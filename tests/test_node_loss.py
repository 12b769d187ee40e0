"""node_loss's parts that need no cluster: every upstream a gateway tried, the checks
judged from literal events, the power rules and the commands' fields (the real loss of a
kube-local node is in tests/kube/test_kube_target.py)."""

from __future__ import annotations

import json

import pytest

from harness import checks as C
from harness.cluster.kube.nodeloss import run_command
from harness.cluster.kubelocal.power import power_rules
from harness.cluster.target import TargetError
from harness.config import ConfigError
from harness.config.schema import load_config
from harness.gateway_logs import parse_json_line
from harness.streams import GatewayLine, Outcome
from tests.test_verdict import T, data, ev, rec, status

LOST = "10.244.1.7:8000"
LIVE = "10.244.2.3:8000"


def line(rid, start, tried, status=200):
    """A gateway line of a request that began at `start` and tried `tried` in order."""
    return GatewayLine(rid, status, tried[-1], "200", 100, 1.0, start + 1.0, tried=list(tried))


def loss(**kw):
    events = [
        ev(T - 50, "pod_created", "p1", address=LOST),
        ev(T - 50, "pod_created", "p2", address=LIVE),
        ev(T, "action", None, action="node_loss", node="n1", pods=["p1"]),
        ev(T + 0.3, "node_lost", "p1", node="n1"),
        ev(T + 41.0, "endpoint_removed", "p1"),
    ]
    base = dict(victims=["p1"], expect_broken_on_victims=True, gateway_logs="access.log")
    return data([rec("a", pod="p2")], events, **(base | kw))


@pytest.mark.unit
def test_nginx_lists_every_upstream_it_tried():
    raw = {"status": 200, "time": 1000.0, "request_id": "r", "request_time": 1.2,
           "upstream_addr": f"{LOST}, {LIVE}", "upstream_status": "504, 200"}  # fmt: skip
    parsed = parse_json_line(json.dumps(raw))
    assert parsed.upstream_addr == LIVE and parsed.tried == [LOST, LIVE]
    assert parse_json_line(json.dumps(raw | {"upstream_addr": "-"})).tried == []


@pytest.mark.unit
def test_a_gateway_that_stops_trying_the_lost_node_soon_passes():
    access = [
        line("b", T + 1, [LOST, LIVE]),  # a 1 s connect timeout, then the live pod
        line("c", T + 3, [LIVE]),  # the lost one marked down: not tried again
        line("d", T + 30, [LIVE]),
    ]
    r = C.lost_node_routing(loss(access=access))
    assert status(r) == "pass", r
    assert r.observed == (
        "1 requests sent to n1's pods after the loss, the last at +1.0 s (1 then answered "
        "from another upstream); its endpoints removed at +41.0 s"
    )
    clean = C.lost_node_routing(loss(access=[line("c", T + 3, [LIVE])]))
    assert status(clean) == "pass" and "no request sent to n1's pods" in clean.observed


@pytest.mark.unit
def test_a_gateway_that_keeps_trying_the_lost_node_until_its_endpoint_goes_fails():
    access = [line(f"r{i}", T + i, [LOST], status=499) for i in range(0, 40, 4)]
    r = C.lost_node_routing(loss(access=access))
    assert status(r) == "fail" and "the last at +36.0 s (0 then answered" in r.observed
    assert "proxy_connect_timeout" in r.hint and "passive health" in r.hint
    # a line from before the loss is not the loss's
    before = C.lost_node_routing(loss(access=[line("z", T - 5, [LOST])]))
    assert status(before) == "pass"


@pytest.mark.unit
def test_lost_node_routing_needs_the_loss_and_a_gateway_log():
    assert status(C.lost_node_routing(data([rec("a")], []))) == "inconclusive"
    r = C.lost_node_routing(loss(gateway_logs=None, access=[]))
    assert status(r) == "inconclusive" and "no gateway log" in r.reason


@pytest.mark.unit
def test_the_streams_a_lost_node_cut_may_hang_and_no_others():
    """A node that lost power sends no RST: its streams hang until the client gives up,
    and are the loss's; a stream on another pod that hung is judged as ever."""
    cut = rec("a", Outcome.HUNG, sent=T - 1, dur=10.0, pod="p1")
    other = rec("b", Outcome.HUNG, sent=T - 1, dur=10.0, pod="p2")
    events = [ev(T, "action", None, action="node_loss", node="n1", pods=["p1"]),
              ev(T + 0.3, "node_lost", "p1")]  # fmt: skip
    kw = dict(victims=["p1"], expect_broken_on_victims=True)
    assert status(C.no_hung_streams(data([cut], events, **kw))) == "pass"
    assert status(C.no_hung_streams(data([cut, other], events, **kw))) == "fail"
    # without a node's loss (a pod_kill) a hung stream on the victim is still a hang
    killed = [ev(T, "action", None, action="kill"), ev(T + 0.3, "exited", "p1")]
    assert status(C.no_hung_streams(data([cut], killed, **kw))) == "fail"


@pytest.mark.unit
def test_the_power_rules_cut_the_bridge_both_ways_on_this_machine():
    assert power_rules("rollcheck3") == [
        ["INPUT", "-i", "rollcheck3", "-j", "DROP"],
        ["OUTPUT", "-o", "rollcheck3", "-j", "DROP"],
    ]


@pytest.mark.unit
def test_the_commands_may_name_only_the_node():
    cfg = load_config(None, ['kube.node_loss_command=["sh", "-c", "echo {node}"]'])
    assert cfg.kube.node_loss_command == ["sh", "-c", "echo {node}"]
    with pytest.raises(ConfigError, match=r"kube.node_loss_command: .*\{pod\}.*the one field"):
        load_config(None, ['kube.node_loss_command=["stop", "{pod}"]'])


@pytest.mark.process
def test_a_command_runs_for_its_node_and_a_failure_is_one_line(tmp_path):
    marker = tmp_path / "ran"
    run_command(["sh", "-c", f"echo {{node}} > {marker}"], "n1", "node_loss_command")
    assert marker.read_text().strip() == "n1"
    with pytest.raises(TargetError, match="kube.node_return_command exited 3 for node n1: no"):
        run_command(["sh", "-c", "echo no >&2; exit 3"], "n1", "node_return_command")
