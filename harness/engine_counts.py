"""The engine as a third witness: what the engines themselves counted during a run.

Each pod's `vllm:request_success_total` by `finished_reason` is sampled through the run
(and its running and waiting gauges); the counts for the window are each pod's increase
from its first sample (from 0 for a pod created during the run), across counter resets
(a restarted engine starts again at 0). A pod that exited is counted up to its last
sample, so for it the count is a lower bound: an abort in its last moments may be
missed, never invented. Pure: samples in, counts out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SUCCESS = "vllm:request_success_total"
OK_REASONS = ("stop", "length")


@dataclass
class _PodCounter:
    last: dict[str, float] = field(default_factory=dict)
    increase: dict[str, float] = field(default_factory=dict)


class EngineCounts:
    def __init__(self, t_start: float):
        self.t_start = t_start
        self.pods: dict[str, _PodCounter] = {}
        self.gauges: list[tuple[float, float, float]] = []  # (t, running, waiting) summed
        self.samples = 0

    def sample(self, t: float, pod: str, created_at: float, metrics: dict[str, float]) -> None:
        """One read of one pod's /metrics (parse_metrics' keys)."""
        self.samples += 1
        by_reason = {
            k[len(SUCCESS) + 1 : -1]: v for k, v in metrics.items() if k.startswith(SUCCESS + "[")
        }
        c = self.pods.get(pod)
        if c is None:
            # a pod there before the run: its counts so far are not this run's
            c = self.pods[pod] = _PodCounter(
                last=by_reason if created_at < self.t_start - 1.0 else {}
            )
        for reason, value in by_reason.items():
            before = c.last.get(reason, 0.0)
            grew = value - before if value >= before else value  # a reset starts at 0
            c.increase[reason] = c.increase.get(reason, 0.0) + grew
            c.last[reason] = value

    def sample_gauges(self, t: float, running: float, waiting: float) -> None:
        self.gauges.append((t, running, waiting))

    def finished(self) -> dict[str, int]:
        total: dict[str, float] = {}
        for c in self.pods.values():
            for reason, n in c.increase.items():
                total[reason] = total.get(reason, 0.0) + n
        return {r: int(round(n)) for r, n in sorted(total.items()) if round(n)}

    def around(self, t: float | None) -> dict | None:
        """The summed gauges of the last sample before t and the first after it."""
        if t is None or not self.gauges:
            return None
        before = [g for g in self.gauges if g[0] <= t]
        after = [g for g in self.gauges if g[0] > t]
        pick = lambda g: {"running": g[1], "waiting": g[2], "t": round(g[0] - t, 2)}  # noqa: E731
        return {
            "before": pick(before[-1]) if before else None,
            "after": pick(after[0]) if after else None,
        }

    def as_dict(self, t_act: float | None = None) -> dict:
        return {
            "finished": self.finished(),
            "pods": sorted(self.pods),
            "samples": self.samples,
            "at_act": self.around(t_act),
        }
