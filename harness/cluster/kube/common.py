"""Names, the connection and small helpers shared by the Kubernetes target's parts."""

from __future__ import annotations

import datetime
import json
import os
import time
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

from harness.cluster.podspec import prestop_sleep_s
from harness.cluster.target import TargetError

OPT_IN = "rollcheck.io/allow-chaos"
RESTORE = "rollcheck.io/restore-pending"
GPU = "nvidia.com/gpu"
KEDA_PAUSE = "autoscaling.keda.sh/paused-replicas"
# KEDA reads its triggers and may scale out, but does not scale in (KEDA >= 2.16)
KEDA_PAUSE_SCALE_IN = "autoscaling.keda.sh/paused-scale-in"
# (verb, resource, group, subresource) the harness needs in its namespace
NEEDED = [
    ("get", "deployments", "apps", ""),
    ("patch", "deployments", "apps", ""),
    ("patch", "deployments", "apps", "scale"),
    ("list", "pods", "", ""),
    ("watch", "pods", "", ""),
    ("delete", "pods", "", ""),
    ("patch", "pods", "", ""),
    ("create", "pods", "", "eviction"),
    ("get", "pods", "", "proxy"),
    ("list", "replicasets", "apps", ""),
    ("list", "endpointslices", "discovery.k8s.io", ""),
    ("list", "events", "", ""),
]


def _ts(value) -> float:
    if value is None:
        return time.time()
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    return datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def _ready(obj) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (obj.status.conditions or []))


def connect(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    """An API client from a kubeconfig (and context), or in-cluster: one clear error otherwise."""
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            config.load_incluster_config()
            return client.ApiClient()
        except ConfigException as exc:
            raise TargetError(f"in-cluster config failed: {exc}") from None
    path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if not Path(path).exists():
        raise TargetError(
            f"kubeconfig {path} does not exist; pass --kubeconfig=PATH or set KUBECONFIG"
        )
    try:
        return config.new_client_from_config(config_file=path, context=context)
    except ConfigException as exc:
        raise TargetError(f"kubeconfig {path}: {str(exc).splitlines()[0]}") from None


def _int_or_str(v):
    text = str(v)
    return text if text.endswith("%") else int(text)


def _message(exc: ApiException) -> str:
    try:
        return json.loads(exc.body).get("message", exc.reason)
    except (TypeError, ValueError):
        return str(exc.reason)


_SERIALIZER = client.ApiClient()  # client objects -> the manifest's dict form


def prestop_s(container) -> float:
    """A client container's preStop sleep, read as lint reads a manifest's."""
    return prestop_sleep_s(_SERIALIZER.sanitize_for_serialization(container)) or 0.0
