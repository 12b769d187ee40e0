"""node_loss's act on a cluster: the node of the busiest engine pod stopped as a power
loss would, by a command the user gives (kube.node_loss_command), and brought back by
another (kube.node_return_command); rollcheck invents no way to stop a node.

What the cluster makes of it is read from its own objects: the node's Ready condition
(Unknown once the node lifecycle controller has not heard from its kubelet for
node-monitor-grace-period, 40-50 s), the unreachable taint, the pods marked not ready and
their endpoints removed, the pods evicted once their toleration of the taint runs out
(300 s by default), and the replacements. The node is written in the restore note before
it is stopped, so that the restore (or `rollcheck kube-restore`) brings it back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kubernetes.client.rest import ApiException

from harness.cluster.kube.common import Cluster, Shared, run_user_command
from harness.cluster.target import PodView, TargetError
from harness.waits import wait_until

COMMAND_S = 60.0  # the longest either command may run
POLL_S = 0.5  # how often the node's object is read while it is lost


def run_command(argv: list[str], node: str, key: str) -> None:
    """Run kube.<key> for `node`; TargetError with its last line when it fails."""
    run_user_command([a.format(node=node) for a in argv], key, f"for node {node}", COMMAND_S)


def node_state(node) -> tuple[str, str, tuple[str, ...]]:
    """(Ready status, its reason, the node's taint keys) of a node object."""
    ready = next((c for c in (node.status.conditions or []) if c.type == "Ready"), None)
    taints = tuple(sorted(t.key for t in (node.spec.taints or [])))
    return (ready.status if ready else "Unknown", (ready.reason or "") if ready else "", taints)


class NodeLoss:
    """Stops and brings back a node; follows its object meanwhile (node_ready,
    node_not_ready and node_taints on the timeline)."""

    def __init__(
        self,
        c: Cluster,
        shared: Shared,
        mark_pending: Callable[[], None],
        pods: Callable[[], list[PodView]],
    ):
        self.c, self.s, self.mark_pending, self.pods = c, shared, mark_pending, pods
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def blocker(self) -> str | None:
        k = self.c.k
        if not k.node_loss_command or not k.node_return_command:
            return (
                "stopping a node needs a command of yours that powers it off and one that "
                "brings it back (kube.node_loss_command and kube.node_return_command, each "
                "with {node}: a cloud CLI, IPMI); `rollcheck kube-local` prints its own"
            )
        return None

    def lose(self, node: str) -> list[str]:
        """Stop `node` (its engine pods in flight are the victims); the pods on it."""
        blocker = self.blocker()
        if blocker:
            raise TargetError(f"cannot stop node {node}: {blocker}")
        victims = [p.name for p in self.pods() if p.node == node and not p.terminating]
        self.s.lost_node = node
        self.mark_pending()  # the node is in the restore note before it goes
        self.c.action("node_loss", node=node, pods=victims)
        run_command(self.c.k.node_loss_command, node, "node_loss_command")
        for pod in victims:  # what the cut streams are judged against: the loss itself
            self.c.emit("node_lost", pod=pod, node=node)
        self._follow(node)
        return victims

    def back(self) -> list[str]:
        """Bring the lost node back (nothing when none is lost); what was done."""
        node = self.s.lost_node
        if not node:
            return []
        if not self.c.k.node_return_command:  # never read from the note: a command to run
            raise TargetError(
                f"node {node} was stopped by a run and is not back: give "
                "kube.node_return_command (as the run had it) to bring it back"
            )
        run_command(self.c.k.node_return_command, node, "node_return_command")
        self.s.lost_node = None
        self.c.action("node_returned", node=node)
        return [f"node {node} brought back"]

    def wait_ready(self, node: str, timeout_s: float) -> bool:
        """Until the node's kubelet has reported it Ready again (its watch says so)."""

        def ready() -> bool:
            try:
                return node_state(self.c.core.read_node(node))[0] == "True"
            except ApiException:
                return True  # not ours to read: nothing to wait for

        return bool(wait_until(ready, timeout_s, f"node {node} Ready", POLL_S, error=None))

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(5)

    def _follow(self, node: str) -> None:
        """Read the node's object until stop(), each change an event."""

        def follow() -> None:
            last = None
            while not self._stop.is_set():
                try:
                    now = node_state(self.c.core.read_node(node))
                except ApiException as exc:
                    self.c.emit("node_unreadable", node=node, status=exc.status)
                    return
                if last is None or now[:2] != last[:2]:
                    kind = "node_ready" if now[0] == "True" else "node_not_ready"
                    self.c.emit(kind, node=node, status=now[0], reason=now[1])
                if last is not None and now[2] != last[2]:
                    self.c.emit("node_taints", node=node, taints=list(now[2]))
                last = now
                self._stop.wait(POLL_S)

        self._watcher = threading.Thread(target=follow, name=f"node-{node}", daemon=True)
        self._watcher.start()
