"""Real vLLM as pods on kube-local: the CPU build that scripts/build-vllm installs, run by
the real kubelet in a container of the simulator image.

The image carries no part of vLLM, only the Python its virtualenv was made with. The node
mounts, read-only and at the paths they have here: the cached install (the virtualenv),
the model harness.engines.vllm built, and this machine's /usr (vLLM's CPU backend
compiles its kernels at start-up through torch's inductor, with g++, and its extensions
link system libraries). Its compile caches are a hostPath beside the install, so a
second start reuses the first one's work, and /dev/shm is an emptyDir in memory.

The Deployment has deploy/vllm's shape (preStop, grace, probes, a GPU limit) with the
real engine's time scale on 2 CPU cores (harness/config/schema.py's
REAL_ENGINE_DEFAULTS). The engine's OpenMP thread is not bound to a CPU
(`VLLM_CPU_OMP_THREADS_BIND=nobind`, one thread): bound, every server takes CPU 0 (the
local target chooses a CPU per engine; a Deployment's pods share one template), and
unbound the kernel spreads the pods' engines over the cores as it does any pod's.
"""

from __future__ import annotations

import math
from pathlib import Path

from harness.cluster.kube import OPT_IN
from harness.cluster.kubelocal.image import IMAGE
from harness.engines import vllm

PORT = 8000


def vllm_objects(
    name: str = "vllm",
    replicas: int = 2,
    shutdown_timeout_s: float = 0,
    model: str = "slow",
    served_name: str = "m",
    prestop_s: float = 1,
    grace_s: int | None = None,
    max_num_seqs: int = 4,
) -> list[dict]:
    """A Deployment, Service and PodDisruptionBudget (maxUnavailable 1) running `vllm
    serve` on a locally built model; shutdown_timeout_s 0 is vLLM's default (abort at
    SIGTERM). The grace period, unless given, outlasts preStop + the shutdown timeout by
    15 s. EngineUnavailable (with the command to run) when vLLM is not installed."""
    if grace_s is None:
        grace_s = max(30, math.ceil(prestop_s + shutdown_timeout_s) + 15)
    venv, model_dir = vllm.venv(), vllm.model_dir(model)
    caches = vllm.cache_dir() / "pod-caches"  # the kubelet makes it (DirectoryOrCreate)
    command = vllm.serve_command(
        "0.0.0.0",
        PORT,
        model_dir,
        served_name,
        shutdown_timeout_s=shutdown_timeout_s,
        max_num_seqs=max_num_seqs,
        eager=True,  # a start in 30-40 s rather than 60-100 s: the drain is the subject
    )
    env = vllm.serve_env() | {
        "HOME": "/home/engine",
        "VLLM_CACHE_ROOT": "/caches/vllm",
        "TORCHINDUCTOR_CACHE_DIR": "/caches/inductor",
        "PYTHONUNBUFFERED": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "OMP_NUM_THREADS": "1",
    }
    mounts, volumes = _engine_volumes(venv, model_dir, caches)
    container = _engine_container(command, env, mounts, prestop_s)
    labels = {"app": name}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels | {OPT_IN: "true"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {
                "metadata": {"labels": labels | {"version": vllm.VERSION}},
                "spec": {
                    # a Service named vllm gives every pod VLLM_PORT=tcp://<ip>:8000 by
                    # service links, and vLLM reads VLLM_PORT as its own port setting: the
                    # engine core failed to start ("VLLM_PORT ... appears to be a URI")
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": grace_s,
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }
    return [deployment, *_service_and_pdb(name, labels)]


def _engine_volumes(venv: Path, model_dir: Path, caches: Path) -> tuple[list, list]:
    """The engine container's mounts and the pod's volumes: the virtualenv, the model and
    this machine's /usr read-only, the compile caches on the host, the rest empty."""
    read_only = {"venv": venv, "model": model_dir, "usr": Path("/usr")}
    mounts = [{"name": k, "mountPath": str(p), "readOnly": True} for k, p in read_only.items()]
    mounts += [
        {"name": "caches", "mountPath": "/caches"},
        {"name": "home", "mountPath": "/home/engine"},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "shm", "mountPath": "/dev/shm"},
    ]
    volumes = [{"name": k, "hostPath": {"path": str(p)}} for k, p in read_only.items()]
    volumes += [
        {"name": "caches", "hostPath": {"path": str(caches), "type": "DirectoryOrCreate"}},
        {"name": "home", "emptyDir": {}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
    ]
    return mounts, volumes


def _engine_container(command: list[str], env: dict, mounts: list, prestop_s: float) -> dict:
    # /health is answered by the API server's event loop, which also streams every answer:
    # beside a replacement's start it once took over 2 s, and a readiness that failed at
    # one slow answer took the only serving pod out of the Service during a drain (CI: 10
    # requests got 503 "no ready endpoints" in 0.1 s). Readiness as deploy/vllm has it:
    # out after several missed answers, not one.
    probe = {"httpGet": {"path": "/health", "port": "http"}, "timeoutSeconds": 5}
    container = {
        "name": "vllm",
        "image": f"{IMAGE}:v1",
        "command": command,
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
        "ports": [{"name": "http", "containerPort": PORT}],
        "resources": {
            "requests": {"cpu": "1", "memory": "2Gi"},
            "limits": {"nvidia.com/gpu": "1"},
        },
        # start-up: about a minute here, minutes on a cold compile cache; the harness's
        # own waits follow the engine, so the kubelet's bound is generous
        "startupProbe": probe | {"periodSeconds": 1, "failureThreshold": 1200},
        "readinessProbe": probe | {"periodSeconds": 1, "failureThreshold": 3},
        "livenessProbe": probe | {"periodSeconds": 5, "failureThreshold": 6},
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", f"{prestop_s:g}"]}}},
        "volumeMounts": mounts,
    }
    return container


def _service_and_pdb(name: str, labels: dict) -> list[dict]:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "selector": labels,
            "ports": [{"name": "http", "port": PORT, "targetPort": "http"}],
        },
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}},
    }
    return [service, pdb]
