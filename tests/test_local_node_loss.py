"""A node's loss on the local target: its pods freeze and their ports answer no new
connection, the local control plane hears nothing and marks the node only after
node_monitor_grace_s, deletes its pods after their toleration, and the node comes back
(the real loss of a kube-local node is in tests/kube/test_kube_target.py)."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from harness.cluster.local import silence
from tests.test_local_target import FAST, target_factory  # noqa: F401 (a fixture)

NODE_LOSS = ["nodes=2", "node_monitor_grace_s=2", "gateway.endpoint_delay_s=0.1"]


def connects(address: str, timeout_s: float = 1.0) -> bool:
    """A connection to `address` completes within timeout_s (a SYN-ACK came)."""
    ip, port = address.rsplit(":", 1)
    try:
        socket.create_connection((ip, int(port)), timeout=timeout_s).close()
        return True
    except TimeoutError:
        return False


def process_state(pid: int) -> str | None:
    """The process's state letter (T: stopped), None once it is gone (or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
    return None if state == "Z" else state


class Stream:
    """One long answer read straight from a pod, in a thread: how many bytes came, and
    how it ended (None while it is open)."""

    def __init__(self, address: str):
        self.bytes, self.end = 0, None
        self._thread = threading.Thread(target=self._read, args=(address,), daemon=True)
        self._thread.start()

    def _read(self, address: str) -> None:
        body = {"messages": [{"role": "user", "content": "x"}], "stream": True,
                "max_tokens": 2000, "ignore_eos": True}  # fmt: skip
        try:
            timeout = httpx.Timeout(30, read=60)
            with httpx.stream("POST", f"http://{address}/v1/chat/completions", json=body,
                              timeout=timeout) as r:  # fmt: skip
                for chunk in r.iter_bytes():
                    self.bytes += len(chunk)
            self.end = "complete"
        except httpx.HTTPError as exc:
            self.end = type(exc).__name__


def when(target, kind: str, pod: str | None = None, node: str | None = None) -> float | None:
    return next(
        (e.t for e in target.events()
         if e.kind == kind and (pod is None or e.pod == pod) and (node is None or e.node == node)),
        None,
    )  # fmt: skip


@pytest.mark.process
def test_a_lost_nodes_pod_freezes_answers_no_connect_and_is_replaced_after_its_toleration(
    target_factory,  # noqa: F811
):
    t = target_factory(
        *NODE_LOSS, "node_monitor_grace_s=4", "pod.unreachable_toleration_s=1", replicas=2
    )
    # the first node: the one an untainted tie would give the replacement to
    victim = next(p for p in t.pods() if p.node == "node-0")
    other = next(p for p in t.pods() if p.name != victim.name)
    assert other.node == "node-1"  # one per node: the least-loaded node takes each
    pid = t.controller.pod(victim.name).proc.pid
    stream = Stream(victim.address)
    t.wait_for(lambda: stream.bytes > 0, 10, "the stream's first bytes")

    t0 = time.time()
    t.lose_node(victim.node)
    # frozen, silent: no SYN-ACK for a new connection, no byte more on the open stream
    assert process_state(pid) == "T"
    assert not connects(victim.address)
    seen = stream.bytes
    time.sleep(0.5)
    assert stream.bytes == seen and stream.end is None
    # the control plane has not heard yet: the pod is ready and routed until the mark
    assert next(p for p in t.pods() if p.name == victim.name).ready
    assert victim.address in t.gateway.applied
    assert when(t, "node_not_ready") is None

    t.wait_for(lambda: when(t, "endpoint_removed", victim.name), 10, "the lost pod's endpoint")
    marked = when(t, "node_not_ready", node=victim.node)
    assert marked is not None and marked - t0 >= 4.0
    assert when(t, "unready", victim.name) >= marked
    t.wait_for(lambda: when(t, "terminating", victim.name), 10, "the taint's eviction")
    assert when(t, "terminating", victim.name) - marked >= 1.0
    t.wait_settled(2, 30, ignoring=(victim.name,))
    new = [p for p in t.pods() if p.name not in (victim.name, other.name)]
    assert new and all(p.node != victim.node for p in new)  # not onto the tainted node
    assert process_state(pid) == "T" and stream.end is None  # still frozen, still open

    t.return_node(victim.node)
    t.wait_for(lambda: victim.name not in {p.name for p in t.pods()}, 10, "the lost pod gone")
    assert process_state(pid) is None
    t.wait_for(lambda: stream.end is not None, 10, "the open stream to end")
    assert stream.end != "complete"  # reset once the node's processes are gone
    assert when(t, "node_ready", node=victim.node) is not None


@pytest.mark.process
def test_a_node_back_before_its_toleration_ran_out_restarts_its_pods_in_place(
    target_factory,  # noqa: F811
):
    t = target_factory(*NODE_LOSS, "pod.unreachable_toleration_s=300", replicas=2)
    victim = t.pods()[0]
    t.lose_node(victim.node)
    t.wait_for(lambda: when(t, "unready", victim.name), 10, "the mark")
    time.sleep(0.5)
    assert when(t, "terminating", victim.name) is None  # tolerated: no replacement
    assert len(t.pods()) == 2
    t.return_node(victim.node)
    t.wait_settled(2, 30)
    back = next(p for p in t.pods() if p.name == victim.name)
    assert back.restarts == 1 and back.ready and connects(victim.address)
    exits = [e for e in t.events() if e.kind == "exited" and e.pod == victim.name]
    assert [e.detail.get("reason") for e in exits] == ["node lost"]


@pytest.mark.unit
def test_a_listener_that_accepts_nothing_leaves_new_connects_unanswered_once_filled():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # never accepts: the kernel's view of a frozen process
        ip, port = listener.getsockname()
        held = silence.fill_accept_queue(ip, port)
        try:
            assert len(held) == 9  # the backlog plus one
            assert not connects(f"{ip}:{port}", 0.5)
        finally:
            silence.release(held)
        assert not held


@pytest.mark.unit
def test_a_listener_that_keeps_accepting_is_named_not_frozen(monkeypatch):
    monkeypatch.setattr(silence, "MOST", 50)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)  # room for every connection even if the thread lags
        accepted, stop = [], threading.Event()

        def accept():
            listener.settimeout(0.1)
            while not stop.is_set():
                try:
                    accepted.append(listener.accept()[0])
                except TimeoutError:
                    pass

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        try:
            with pytest.raises(silence.SilenceError, match="kept accepting"):
                silence.fill_accept_queue(*listener.getsockname())
        finally:
            stop.set()
            thread.join(2)
            for s in accepted:
                s.close()


@pytest.mark.unit
def test_nothing_listening_is_nothing_to_hold():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connects are refused
        assert silence.fill_accept_queue("127.0.0.1", port) == []
