"""The deadline of the Job this process runs in (the nightly CronJob's pod), if any.

A Job's activeDeadlineSeconds counts from the Job's start (status.startTime); past it the
Job controller deletes its pods, and the kubelet's SIGTERM ends the session wherever it
is. The pod learns its own name and namespace from the downward API (the chart's CronJob sets
ROLLCHECK_POD_NAME and ROLLCHECK_POD_NAMESPACE), else from its hostname and its service
account's namespace file; its Job is its owner. RBAC: get on pods and batch/jobs
(the chart's Role <release>-self).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.cluster.kube.common import _message, _ts

SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def own_pod() -> tuple[str, str] | None:
    """(name, namespace) of the pod this process runs in, or None outside a pod."""
    if not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    name = os.environ.get("ROLLCHECK_POD_NAME") or os.environ.get("HOSTNAME")
    namespace = os.environ.get("ROLLCHECK_POD_NAMESPACE")
    if not namespace:
        try:
            namespace = SA_NAMESPACE.read_text().strip()
        except OSError:
            return None
    return (name, namespace) if name and namespace else None


def job_deadline(
    api: client.ApiClient, pod: str, namespace: str, now: float | None = None
) -> tuple[float, str] | None:
    """(seconds left, what says so) for the pod's Job's activeDeadlineSeconds; None when
    the pod belongs to no Job or the Job has no deadline. Raises ApiException."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    owners = core.read_namespaced_pod(pod, namespace).metadata.owner_references or []
    job_name = next((o.name for o in owners if o.kind == "Job"), None)
    if job_name is None:
        return None
    job = batch.read_namespaced_job(job_name, namespace)
    limit = job.spec.active_deadline_seconds
    if not limit:
        return None
    started = _ts(job.status.start_time) if job.status.start_time else None
    now = time.time() if now is None else now
    left = limit - (now - started) if started is not None else float(limit)
    return left, f"Job {job_name}'s activeDeadlineSeconds {limit}, {max(0.0, left):.0f} s left"


def nightly_deadline(cfg) -> tuple[float | None, str]:
    """In a pod of a Job: its deadline, or (None, why it is not known)."""
    here = own_pod()
    if here is None:
        return None, "not in a pod"
    from harness.cluster.kube.common import connect

    try:
        found = job_deadline(connect(None, None), *here)
    except ApiException as exc:
        return None, f"its Job's deadline could not be read ({exc.status}: {_message(exc)})"
    except Exception as exc:  # an unreachable API: the session finds out soon enough
        return None, f"its Job's deadline could not be read ({exc})"
    if found is None:
        return None, f"pod {here[0]} has no Job with activeDeadlineSeconds"
    return found
