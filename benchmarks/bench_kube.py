"""kube-local: binaries from the cache, start to a ready API, control-plane memory at rest.

Run: .venv/bin/python -m benchmarks.bench_kube
(The first build from an empty cache is timed by `time bash scripts/build-kube`.)
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

from harness.cluster.kubelocal import KubeLocal


def rss_mb(pid: int) -> float:
    total = 0
    for child in [pid] + [
        int(p)
        for p in subprocess.run(
            ["pgrep", "-g", str(pid)], capture_output=True, text=True
        ).stdout.split()
    ]:
        try:
            for line in Path(f"/proc/{child}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def main() -> None:
    t0 = time.monotonic()
    subprocess.run(["bash", "scripts/build-kube"], check=True, capture_output=True)
    print(f"binaries from a warm cache: {time.monotonic() - t0:.2f} s")
    with tempfile.TemporaryDirectory() as d:
        kl = KubeLocal(Path(d))
        t0 = time.monotonic()
        kl.start()
        print(
            f"start to ready API: {kl.control_plane.timings['api_ready_s']:.2f} s "
            f"(whole start incl. certificates, etcd, controllers: {time.monotonic() - t0:.2f} s)"
        )
        time.sleep(15)
        mem = {n: rss_mb(p.pid) for n, p in kl.control_plane.procs.items()}
        kl.stop()
    print(
        "memory at rest: "
        + ", ".join(f"{n} {m:.0f} MB" for n, m in mem.items())
        + f"; total {sum(mem.values()):.0f} MB"
    )


if __name__ == "__main__":
    main()
