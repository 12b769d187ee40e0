"""kube-local (cluster.py): a real control plane (controlplane.py), a node agent running
simulator pods (agent.py) on a pod network of loopback addresses (podnet.py), and an
nginx ingress fed from a Service's EndpointSlices."""

from harness.cluster.kubelocal.cluster import EndpointSliceIngress, KubeLocal
from harness.cluster.kubelocal.controlplane import ControlPlaneError

__all__ = ["ControlPlaneError", "EndpointSliceIngress", "KubeLocal"]
