"""kube-local (cluster.py): a real control plane (controlplane.py) and real nodes, each a
containerd and a kubelet on a bridge of its own (node.py), running the simulator image
built from the installed package (image.py), and an nginx ingress fed from a Service's
EndpointSlices; on request the cluster's own scalers, Prometheus and KEDA (scalers.py),
and a Gateway API implementation, Traefik, routing by a namespace's HTTPRoutes
(gateway.py).
kill.py and power.py are the commands a run is given to kill an engine container and to
stop a node (KubeLocal.kill_command, power_command)."""

from harness.cluster.kubelocal.cluster import EndpointSliceIngress, KubeLocal
from harness.cluster.kubelocal.controlplane import ControlPlaneError
from harness.cluster.kubelocal.gateway import GatewayError, TraefikGateway
from harness.cluster.kubelocal.image import ImageError
from harness.cluster.kubelocal.node import NodeError
from harness.cluster.kubelocal.scalers import ScalersError

__all__ = [
    "ControlPlaneError",
    "EndpointSliceIngress",
    "GatewayError",
    "ImageError",
    "KubeLocal",
    "NodeError",
    "ScalersError",
    "TraefikGateway",
]
