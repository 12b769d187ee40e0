"""kube-local on real nodes: start to every node Ready and deploy/sim served; a pod's
start to Ready; memory per node (containerd + kubelet) and per pod (shim, sandbox,
engine); the control plane at rest.

Run as root: .venv/bin/python -m benchmarks.bench_kube [ROUNDS]
(The first build from an empty cache is timed by `time bash scripts/build-kube`.)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from kubernetes import client

from harness.client import chat_payload
from harness.cluster.kubelocal import KubeLocal
from harness.cluster.kubelocal.node import _container_pids, _shims

ROOT = Path(__file__).resolve().parents[1]


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def _ready(pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def wait(cond, timeout_s: float = 120) -> float:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError
        time.sleep(0.05)
    return time.monotonic() - t0


def one_start(d: Path) -> dict:
    kl = KubeLocal(d)
    t0 = time.monotonic()
    kl.start()
    figures = {"nodes Ready": time.monotonic() - t0} | {
        f"  of which {k}": v for k, v in kl.timings.items() if k != "start_s"
    }
    try:
        kl.apply(ROOT / "deploy/sim/sim.yaml")
        core = client.CoreV1Api(kl.api)

        def served() -> bool:
            pods = core.list_namespaced_pod("default").items
            return len(pods) == 2 and all(_ready(p) for p in pods)

        wait(served)
        ing = kl.ingress("rollcheck-sim")
        body = chat_payload(None, "hello", 3)

        def answered() -> bool:
            try:
                r = httpx.post(ing.url + "/v1/chat/completions", json=body, timeout=5)
                return r.status_code == 200 and "[DONE]" in r.text
            except httpx.HTTPError:
                return False

        wait(answered)
        figures["start to deploy/sim served"] = time.monotonic() - t0
        apps = client.AppsV1Api(kl.api)
        apps.patch_namespaced_deployment_scale(
            "rollcheck-sim", "default", {"spec": {"replicas": 3}}
        )
        t1 = time.monotonic()
        wait(lambda: sum(_ready(p) for p in core.list_namespaced_pod("default").items) == 3)
        figures["a new pod: created to Ready"] = time.monotonic() - t1
        time.sleep(10)
        figures["mem per node (containerd + kubelet), MB"] = statistics.mean(
            rss_mb([p.pid for p in n.procs.values()]) for n in kl.nodes
        )
        pods = sum(len(_container_pids(n.dir / "runc")) // 2 for n in kl.nodes)
        engines, sandboxes, shims = [], [], []
        for n in kl.nodes:
            shims += _shims(n.dir / "state")
            for pid in _container_pids(n.dir / "runc"):
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                (sandboxes if cmd.startswith(b"sleep") else engines).append(pid)
        figures["mem per pod: shim, MB"] = rss_mb(shims) / pods
        figures["mem per pod: sandbox, MB"] = rss_mb(sandboxes) / pods
        figures["mem per pod: engine, MB"] = rss_mb(engines) / pods
        figures["control plane at rest, MB"] = rss_mb(
            [p.pid for p in kl.control_plane.procs.values()]
        )
    finally:
        t2 = time.monotonic()
        kl.stop()
        figures["stop"] = time.monotonic() - t2
    return figures


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    t0 = time.monotonic()
    subprocess.run(["bash", "scripts/build-kube"], check=True, capture_output=True, cwd=ROOT)
    print(f"binaries from a warm cache: {time.monotonic() - t0:.2f} s")
    runs = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as d:
            runs.append(one_start(Path(d)))
    for key in runs[0]:
        values = [r[key] for r in runs]
        unit = "" if "MB" in key else " s"
        print(f"{key:45s} median {statistics.median(values):7.2f}{unit}  "
              f"(min {min(values):.2f}, max {max(values):.2f}, n={len(values)})")  # fmt: skip


if __name__ == "__main__":
    main()
