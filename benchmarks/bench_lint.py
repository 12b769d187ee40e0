"""How lint's time grows with the number of manifest files (it should be linear).

Run: .venv/bin/python -m benchmarks.bench_lint [--files 400 800 1600]

Each file holds an engine Deployment, its Service and a PDB in its own namespace plus
one shared namespace, the shape of a fleet's manifests folder. Prints, per size, the time
to read and parse the files and the time of the rules, and seconds per 100 files.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from harness import lint

DOC = """apiVersion: apps/v1
kind: Deployment
metadata: {{name: llm-{i}, namespace: {ns}}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: llm-{i}}}}}
  template:
    metadata: {{labels: {{app: llm-{i}}}}}
    spec:
      terminationGracePeriodSeconds: 600
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.32.0
          args: ["--model", "m", "--shutdown-timeout", "540"]
          startupProbe: {{httpGet: {{path: /health, port: 8000}}, periodSeconds: 10, failureThreshold: 90}}
          lifecycle: {{preStop: {{sleep: {{seconds: 15}}}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: llm-{i}, namespace: {ns}}}
spec: {{selector: {{app: llm-{i}}}, ports: [{{port: 80, targetPort: 8000}}]}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: llm-{i}, namespace: {ns}}}
spec: {{maxUnavailable: 1, selector: {{matchLabels: {{app: llm-{i}}}}}}}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, nargs="+", default=[400, 800, 1600])
    args = ap.parse_args()
    print(f"{'files':>6} {'read s':>8} {'rules s':>8} {'s per 100':>10} findings")
    for n in args.files:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(n):
                ns = "shared" if i % 2 else f"team-{i}"
                Path(tmp, f"m{i:05}.yaml").write_text(DOC.format(i=i, ns=ns))
            t0 = time.perf_counter()
            manifests = lint.load_manifests([tmp])
            t1 = time.perf_counter()
            findings = lint.lint(manifests)
            t2 = time.perf_counter()
        print(
            f"{n:>6} {t1 - t0:>8.2f} {t2 - t1:>8.2f} {100 * (t2 - t0) / n:>10.3f} {len(findings)}"
        )


if __name__ == "__main__":
    main()
