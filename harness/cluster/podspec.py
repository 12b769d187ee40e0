"""What a pod's spec says about how it starts and drains, in the manifest's own (dict)
form: read once here, by lint from manifests, by the Kubernetes target from the live
Deployment, and by the checks from the probes a run found. Pure functions."""

from __future__ import annotations

import re
import shlex

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
