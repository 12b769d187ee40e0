"""The Kubernetes target: one namespace and one opted-in Deployment, through the official client.

Safety first: the Deployment must carry `rollcheck.io/allow-chaos: "true"`; nothing
outside the namespace is touched (nodes only with `kube.allow_node_drain`, a PriorityClass
of the run's only with `kube.allow_preemption`, a node stopped only by the user's own
`kube.node_loss_command`);
`kube.dry_run` prints each action instead of taking it (harness.dryrun.kube_target); what is changed
(replicas, pod template, strategy, cordons, KEDA pauses, a preemptor, a lost node) is
recorded in an
annotation before the first change and put back on close, even after a failure,
and a run refuses to start while a previous run's restore is pending.
Observation: watches on pods, ReplicaSets, EndpointSlices and events, resumed
after disconnects from the last resourceVersion (410 Gone -> relist), turned
into the same timestamped events as the local target.

The parts: common.py (names, connection), preflight.py, watches.py, actions.py,
preemption.py, nodeloss.py, restore.py; target.py assembles KubeTarget from them.
"""

from harness.cluster.kube.common import GPU, KEDA_PAUSE, OPT_IN, RESTORE, connect
from harness.cluster.kube.restore import restore_pending
from harness.cluster.kube.target import KubeTarget
from harness.cluster.kube.watches import pod_view

__all__ = [
    "GPU",
    "KEDA_PAUSE",
    "OPT_IN",
    "RESTORE",
    "KubeTarget",
    "connect",
    "pod_view",
    "restore_pending",
]
