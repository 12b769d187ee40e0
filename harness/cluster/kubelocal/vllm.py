"""Real vLLM as pods on kube-local: the CPU build that scripts/build-vllm installs, run by
the real kubelet in a container of the simulator image.

The image carries no part of vLLM, only the Python its virtualenv was made with. The node
mounts, read-only and at the paths they have here: the cached install (the virtualenv),
the model harness.engines.vllm built, and this machine's /usr (vLLM's CPU backend
compiles its kernels at start-up through torch's inductor, with g++, and its extensions
link system libraries). Its compile caches are a hostPath beside the install, so a
second start reuses the first one's work, and /dev/shm is an emptyDir in memory.

A pod is warmed before it is Ready: its startup probe succeeds only once the engine has
answered a short prompt and one of the load's longest (`warm_prompt_tokens`). A CPU
engine's first prefill of a prompt length is seconds (15-24 s for the load's first
149-token prompts on a pod warmed with short ones, docs/facts.md); the harness warms
the pods there at the steady state, and a replacement that took the load cold broke the
TTFT budget after a drain that was otherwise well handled (CI, 2026-12-06).

The Deployment has deploy/vllm's shape (preStop, grace, probes, a GPU limit) with the
real engine's time scale on 2 CPU cores (harness/engines/kinds.py's
VLLM_DEFAULTS). The engine's OpenMP thread is not bound to a CPU
(`VLLM_CPU_OMP_THREADS_BIND=nobind`, one thread): bound, every server takes CPU 0 (the
local target chooses a CPU per engine; a Deployment's pods share one template), and
unbound the kernel spreads the pods' engines over the cores as it does any pod's.
"""

from __future__ import annotations

import json
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
    warm_prompt_tokens: int = 64,
) -> list[dict]:
    """A Deployment, Service and PodDisruptionBudget (maxUnavailable 1) running `vllm
    serve` on a locally built model; shutdown_timeout_s 0 is vLLM's default (abort at
    SIGTERM). The grace period, unless given, outlasts preStop + the shutdown timeout by
    15 s. warm_prompt_tokens: the load's longest prompt (load.prompt_tokens), which the
    startup probe has the engine answer before the pod is Ready. EngineUnavailable (with
    the command to run) when vLLM is not installed."""
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
    warm = warm_probe(venv, served_name, warm_prompt_tokens)
    container = _engine_container(command, env, mounts, prestop_s, warm)
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


TWO = {"max_tokens": 2, "ignore_eos": True}  # each warm-up answer
WARM_SCRIPT = """
import sys, urllib.request
try:
    for body in sys.argv[2:]:
        req = urllib.request.Request(sys.argv[1], body.encode(), {"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=50).read()
except Exception as e:
    sys.exit(f"not warmed yet: {e}")
"""


def warm_probe(venv: Path, served_name: str, prompt_tokens: int) -> dict:
    """An exec probe that has the engine answer a short prompt and one of prompt_tokens
    (two tokens each, not streamed): it fails while the engine is not up (connection
    refused), and succeeds once both answers came."""
    from loadgen.settings import prompt_text

    bodies = [
        json.dumps({"model": served_name, "messages": [{"role": "user", "content": p}]} | TWO)
        for p in ("warm-up: count to ten", prompt_text(prompt_tokens, 0))
    ]
    python = str(venv / "bin" / "python")
    url = f"http://127.0.0.1:{PORT}/v1/chat/completions"
    return {"exec": {"command": [python, "-c", WARM_SCRIPT, url, *bodies]}, "timeoutSeconds": 110}


def _engine_container(
    command: list[str], env: dict, mounts: list, prestop_s: float, warm: dict
) -> dict:
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
        # own waits follow the engine, so the kubelet's bound is generous. Started once
        # the engine has answered the warm-up prompts (Ready a second after).
        "startupProbe": warm | {"periodSeconds": 2, "failureThreshold": 600},
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
