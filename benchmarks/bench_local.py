"""Local target: wall time from start to all pods ready (3 and 8 replicas, startup_s 0),
and a 3-replica rollout against the planner's prediction for the same settings.

Run: .venv/bin/python -m benchmarks.bench_local
"""

from __future__ import annotations

import tempfile
import time

from harness.cluster.local import LocalTarget
from harness.config.schema import load_config
from harness.plan import plan_rollout
from harness.scenario import STARTUP_OVERHEAD_S


def up_time(replicas: int) -> float:
    cfg = load_config(
        None, [f"replicas={replicas}", "engine.startup_s=0", "pdb.min_available=null"]
    )
    with tempfile.TemporaryDirectory() as d:
        t0 = time.monotonic()
        with LocalTarget(cfg, d) as t:
            t.wait_settled(replicas, 120)
            return time.monotonic() - t0


def rollout(surge: str, unavailable: str) -> tuple[float, float]:
    cfg = load_config(None, ["replicas=3", "engine.startup_s=0.5", "pdb.min_available=null"])
    with tempfile.TemporaryDirectory() as d, LocalTarget(cfg, d) as t:
        t.wait_settled(3, 60)
        t0 = time.monotonic()
        t.rollout("v2", max_surge=surge, max_unavailable=unavailable)
        t.wait_for(t.rollout_done, 120, "rollout")
        took = time.monotonic() - t0
    # no load: old pods drain in preStop + SIGTERM handling
    ready_s = cfg.engine.startup_s + STARTUP_OVERHEAD_S
    drain_s = cfg.pod.prestop_s + 0.3
    s, u = cfg.strategy.__class__(surge, unavailable).resolve(3)
    plan = plan_rollout(3, ready_s, drain_s, s, u, gpu_bound=False, step_s=0.1)
    return took, plan.duration_s


def main() -> None:
    for n in (3, 8):
        print(f"up -> {n} pods ready (startup_s 0): {up_time(n):.2f} s")
    for surge, unavailable in (("1", "0"), ("2", "1"), ("3", "0")):
        took, predicted = rollout(surge, unavailable)
        print(
            f"rollout 3 replicas maxSurge {surge} maxUnavailable {unavailable}: "
            f"{took:.2f} s measured, {predicted:.2f} s predicted, ratio {took / predicted:.2f}"
        )


if __name__ == "__main__":
    main()
