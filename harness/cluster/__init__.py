"""Targets: one interface (target.py) over the embedded local target (local/), a
Kubernetes cluster (kube/) and the embedded control plane that tests it (kubelocal/)."""

from harness.cluster.target import (
    CannotRun,
    EvictionRefused,
    PodView,
    Target,
    TargetError,
    evict_retrying,
    strategy_changes,
)

__all__ = [
    "CannotRun",
    "EvictionRefused",
    "PodView",
    "Target",
    "TargetError",
    "evict_retrying",
    "strategy_changes",
]
