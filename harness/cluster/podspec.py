"""What a pod's spec says, read the way lint reads manifests: used by the Kubernetes
target."""

from __future__ import annotations

from kubernetes import client

from harness.lint import prestop_sleep_s

_SERIALIZER = client.ApiClient()  # client objects -> the manifest's dict form


def prestop_s(container) -> float:
    """The container's preStop sleep (exec `sleep N` or the sleep action)."""
    return prestop_sleep_s(_SERIALIZER.sanitize_for_serialization(container)) or 0.0
