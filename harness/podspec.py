"""What a pod's spec says about how it starts and drains and which container is the
engine, in the manifest's own (dict) form: read once here, by lint from manifests, by the
Kubernetes target from the live Deployment and its pods, and by the checks from the
probes a run found. Pure functions, below every target."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from harness.errors import RollcheckError

DEFAULT_GRACE_S = 30  # terminationGracePeriodSeconds when unset
DEFAULT_FAILURE_THRESHOLD = 3  # a probe's failureThreshold when unset
DEFAULT_PERIOD_S = 10  # a probe's periodSeconds when unset


def number(text: str) -> float | None:
    """The number a manifest's text states, or None."""
    try:
        return float(text)
    except ValueError:
        return None


def window_s(failure_threshold: float, period_s: float) -> float:
    """failureThreshold x periodSeconds: how long a probe lets a container fail."""
    return float(failure_threshold) * float(period_s)


def probe_window_s(probe: dict | None) -> float | None:
    """A manifest probe's window, or None for no probe."""
    if not probe:
        return None
    return window_s(
        probe.get("failureThreshold", DEFAULT_FAILURE_THRESHOLD),
        probe.get("periodSeconds", DEFAULT_PERIOD_S),
    )


def shutdown_timeout_s(c: dict) -> float | None:
    """The container's --shutdown-timeout (vLLM's flag; the simulator takes the same)."""
    words = []
    for part in (c.get("command") or []) + (c.get("args") or []):
        try:
            words += shlex.split(str(part))
        except ValueError:
            words.append(str(part))
    for i, w in enumerate(words):
        if w == "--shutdown-timeout" and i + 1 < len(words):
            return number(words[i + 1])
        if w.startswith("--shutdown-timeout="):
            return number(w.split("=", 1)[1])
    return None


def prestop_sleep_s(c: dict) -> float | None:
    """The container's preStop sleep (the sleep action, or exec `sleep N`), or None."""
    pre = ((c.get("lifecycle") or {}).get("preStop")) or {}
    if "sleep" in pre:  # Kubernetes 1.30+ sleep action
        return number(str((pre.get("sleep") or {}).get("seconds", "")))
    cmd = " ".join(str(x) for x in ((pre.get("exec") or {}).get("command") or []))
    m = re.search(r"\bsleep\s+(\d+(?:\.\d+)?)", cmd)
    return float(m.group(1)) if m else None


# What runs an inference engine, by image or command line (lint and the targets agree)
ENGINE_IMAGES = [r"vllm", r"sglang", r"text-generation-inference", r"rollcheck[/-]sim"]
ENGINE_COMMANDS = [
    r"vllm(\s+serve|\.entrypoints)",
    r"sglang\.launch_server",
    r"rollcheck\s+sim",
    r"harness\.cli\s+sim",
]


def command_line(c: dict) -> str:
    return " ".join(str(x) for x in (c.get("command") or []) + (c.get("args") or []))


def runs_engine(c: dict, images=ENGINE_IMAGES, commands=ENGINE_COMMANDS) -> bool:
    """Whether a container runs a known inference engine (its image or command line)."""
    image, cmd = str(c.get("image", "")), command_line(c)
    return any(re.search(p, image) for p in images) or any(re.search(p, cmd) for p in commands)


class NoEngineContainer(RollcheckError, ValueError):
    """Which container is the engine cannot be told: the message says what to set."""


@dataclass(frozen=True)
class EngineContainer:
    """The container rollcheck treats as the engine, the port it serves on, and why."""

    name: str
    index: int
    port: int | None
    why: str


def _port_of(c: dict, target) -> int | None:
    """The container's port that a Service targetPort (a name or a number) names."""
    for p in c.get("ports") or []:
        if isinstance(target, str) and not target.isdigit():
            if p.get("name") == target:
                return int(p["containerPort"])
        elif int(p.get("containerPort", -1)) == int(target):
            return int(p["containerPort"])
    return None


def _first_port(c: dict) -> int | None:
    ports = c.get("ports") or []
    return int(ports[0]["containerPort"]) if ports else None


def engine_container(
    pod: dict, name: str | None = None, services: list[tuple[str, object]] = ()
) -> EngineContainer:
    """Which of a pod spec's containers is the engine. A sidecar may be listed first
    (Istio's istio-proxy with holdApplicationUntilProxyStarts) or own the Service's port
    (llm-d's routing sidecar on 8000 in front of vLLM on 8200), so the order decides
    nothing: `name` (kube.container) if given; else the container whose port a Service
    targets (`services`: (service name, targetPort) pairs) when it runs a known engine or
    none does; else the one container that runs a known engine image or command; else the
    pod's only container. Raises NoEngineContainer with what to set."""
    containers = pod.get("containers") or []
    names = [str(c.get("name")) for c in containers]
    if name:
        if name not in names:
            raise NoEngineContainer(
                f"kube.container {name!r} is not a container of the pod template "
                f"(it has {', '.join(names) or 'none'}); set kube.container to one of them"
            )
        i = names.index(name)
        return EngineContainer(name, i, _first_port(containers[i]), "named by kube.container")
    engines = [i for i, c in enumerate(containers) if runs_engine(c)]
    targeted = [
        (i, svc, target, port)
        for svc, target in services
        for i, c in enumerate(containers)
        if (port := _port_of(c, target)) is not None
    ]
    for i, svc, target, port in targeted:
        if i in engines or not engines:
            why = f"Service {svc} targets its port {target}"
            return EngineContainer(names[i], i, port, why)
    if len(engines) == 1:
        i = engines[0]
        why = f"runs a known engine ({containers[i].get('image')})"
        if targeted:
            j, svc, target, _ = targeted[0]
            why += f"; Service {svc} targets {names[j]}'s port {target}, a proxy in front of it"
        return EngineContainer(names[i], i, _first_port(containers[i]), why)
    if len(containers) == 1:
        return EngineContainer(names[0], 0, _first_port(containers[0]), "the pod's only container")
    which = "several run" if engines else "none runs"
    raise NoEngineContainer(
        f"cannot tell which of the containers {', '.join(names)} is the engine ({which} a "
        "known engine image or command, and no Service targets one of their ports); "
        "set kube.container=NAME"
    )


def memory_gib(quantity) -> float | None:
    """A memory quantity (128Mi, 4Gi, 5G, 1e9) in GiB; None when it cannot be read."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
             "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}  # fmt: skip
    text = str(quantity).strip()
    for unit, factor in sorted(units.items(), key=lambda u: -len(u[0])):
        if text.endswith(unit):
            text, scale = text[: -len(unit)], factor
            break
    else:
        scale = 1
    try:
        return float(text) * scale / 2**30
    except ValueError:
        return None
