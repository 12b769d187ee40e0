"""Real vLLM as pods on kube-local (harness/cluster/kubelocal/vllm.py): a pod's creation
to Ready, one pod alone and two side by side, and each pod's memory, against the same
engine started on the host (docs/facts.md: 57-60 s for the slow model, warm cache).

Run as root: .venv/bin/python -m benchmarks.bench_kube_vllm
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from kubernetes import client

from benchmarks.bench_kube import _ready, rss_mb, wait
from harness.cluster.kubelocal import KubeLocal
from harness.cluster.kubelocal.node import _container_pids
from harness.cluster.kubelocal.vllm import vllm_objects
from harness.proc import children, cmdline


def _tree(pid: int) -> list[int]:
    """A process and its descendants (vLLM's API server and its engine core)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children(p)
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        kl = KubeLocal(Path(d), gpus_per_node=4)
        kl.start()
        core = client.CoreV1Api(kl.api)
        try:
            for replicas in (1, 2):
                ns = f"bench-{replicas}"
                core.create_namespace({"metadata": {"name": ns}})
                wait(lambda: core.list_namespaced_service_account(ns).items, 30)  # noqa: B023
                kl.apply_objects(vllm_objects(replicas=replicas), ns)

                def ready() -> bool:
                    pods = core.list_namespaced_pod(ns).items  # noqa: B023
                    return sum(_ready(p) for p in pods) == replicas  # noqa: B023

                took = wait(ready, 900)
                print(f"{replicas} vllm pod(s): created to Ready {took:.1f} s")
                engines = [
                    pid
                    for n in kl.nodes
                    for pid in _container_pids(n.dir / "runc")
                    if "vllm" in cmdline(pid)
                ]
                for pid in engines:
                    print(f"  pod engine {pid}: {rss_mb(_tree(pid)):.0f} MB resident")
                core.delete_namespace(ns)
                wait(lambda: not core.list_namespaced_pod(ns).items, 120)  # noqa: B023
        finally:
            kl.stop()


if __name__ == "__main__":
    main()
