"""Node loss: an involuntary disruption a PodDisruptionBudget does not stop. The busiest
engine pod's node stops as a power loss would: no RST reaches anyone, its kubelet falls
silent, and the cluster learns of it only when the node lifecycle controller marks the
node (node-monitor-grace-period, 40-50 s) and, once the pods' toleration of the
unreachable taint runs out (300 s by default), evicts them.

Streams in flight on the lost node can only hang until the client gives up (they are the
loss's, not judged as hangs); the gateway must stop sending new requests to the lost
node's pods within scenario.lost_node_routing_s; replacements must be ready and serving
within scenario.recovery_s of the loss. The node is brought back at the end.
On the local target the node's pods freeze and their ports answer no new connection; its
own control plane marks the node after node_monitor_grace_s. SKIPPED on a cluster
without kube.node_loss_command and kube.node_return_command.
"""

import time

import pytest

from harness import checks


@pytest.mark.node_loss
def test_node_loss(scenario):
    target = scenario.target
    scenario.preconditions.require("stop a node", target.node_loss_blocker())

    # steady state: load running, streams in flight on the pod whose node goes
    scenario.steady_state()
    victim = scenario.disruption.busiest_pod()

    # act: the node stops; the cluster sees it only once its controller marks the pods
    on_node = [p.name for p in target.pods() if p.node == victim.node and not p.terminating]
    scenario.disruption.disturb(*on_node)
    t_act = time.time()
    target.lose_node(victim.node)
    scenario.disruption.confirm(
        f"the loss of node {victim.node}",
        {"unready", "terminating"},
        on_node,
        since=t_act,
        none="the node lifecycle controller marks a silent node's pods not ready only "
        "after node-monitor-grace-period (40-50 s): set scenario.recovery_s above it",
    )

    # observe: replacements ready elsewhere (the lost pods stay terminating until their
    # kubelet is back to end them), then the node comes back
    scenario.recovery.wait(ignoring=tuple(on_node))
    target.return_node(victim.node)
    scenario.cool_down()

    # judge
    scenario.judge(
        checks.lost_node_routing,
        checks.recovery_time,
        expect_broken_on_victims=True,
    )
