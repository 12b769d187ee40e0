"""The embedded local target (target.py): simulator pods (kubelet.py) behind a real nginx
(nginx.py), run by a local control plane (controller.py)."""

from harness.cluster.local.target import DELETION_COST, EvictionRefused, LocalTarget

__all__ = ["DELETION_COST", "EvictionRefused", "LocalTarget"]
