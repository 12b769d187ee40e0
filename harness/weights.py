"""weighted_canary's arithmetic: the windows in which the gateway split the traffic by a
weight, and each step's judgement from the streams sent in its window. Pure: records and
events in, a judgement out; the scenario judges each step live with it (to roll back), and
the checks judge every step again from the final, traced records.

The split is held to its weight as the Gateway API Inference Extension's conformance test
holds a gateway's (kubernetes-sigs/gateway-api-inference-extension,
conformance/tests/gateway_weighted_two_pools.go: 200 requests at 70/30, the share within
max(10 percentage points, 3 binomial standard deviations) of the weight).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.events import Event, EventKind
from harness.significance import goodput_test, latency_change
from harness.streams import Outcome, StreamRecord

SPLIT_POINTS = 0.10  # the conformance test's absolute tolerance: 10 percentage points
SPLIT_SIGMAS = 3.0  # or 3 binomial standard deviations, whichever is wider
# each version's streams compared: time to first token and the stream's median
# inter-token latency (per stream, so one slow token does not decide it)
LATENCY = (("ttft_s", "TTFT"), ("itl_p50_s", "median ITL"))


def split_tolerance(expected: float, n: int) -> float:
    """How far a share of n requests may lie from the expected share (a fraction)."""
    if n <= 0:
        return math.inf
    return max(SPLIT_POINTS, SPLIT_SIGMAS * math.sqrt(expected * (1 - expected) / n))


def candidate_replicas(percent: float, replicas: int) -> int:
    """The candidate's replicas at a weight: ceil(weight x replicas), at least one, as Argo
    Rollouts scales a canary with traffic routing (a candidate of one replica given 100%
    of a fleet's traffic would be judged on a load no replica of the baseline carries)."""
    return max(1, math.ceil(percent * replicas / 100 - 1e-9))


@dataclass(frozen=True)
class Window:
    """A time the gateway split the traffic at one weight: from when it applied the
    weight to when it applied the next (or stopped splitting)."""

    percent: float
    start: float
    end: float


def windows(events: Sequence[Event], t_end: float) -> list[Window]:
    """The weights the gateway applied, in order (percent above 0 only), from its own
    gateway_updated events: an endpoint change at the same weight goes on in the window.
    A window ends when the next weight was asked for (its `canary_weight` action), not
    when the gateway applied it: in between, a gateway may route by either."""
    changes: list[tuple[float, float]] = []  # (when applied, percent; 0: no split)
    asked = sorted(
        e.t
        for e in events
        if e.kind == EventKind.ACTION and e.detail.get("action") == "canary_weight"
    )
    for e in events:
        if e.kind != EventKind.GATEWAY_UPDATED:
            continue
        split = e.detail.get("split") or {}
        percent = float(split.get("percent") or 0)
        if not changes or changes[-1][1] != percent:
            changes.append((e.t, percent))
    out = []
    for i, (t, percent) in enumerate(changes):
        end = changes[i + 1][0] if i + 1 < len(changes) else t_end
        end = min([end] + [a for a in asked if t < a < end])
        if percent > 0:
            out.append(Window(percent, t, end))
    return out


def split_applied(events: Sequence[Event], key: str, value: float, since: float) -> float | None:
    """When the gateway applied a split whose `key` (percent, mirror) is `value`, at or
    after `since` (its own gateway_updated event); None while it has not."""
    for e in events:
        if e.kind == EventKind.GATEWAY_UPDATED and e.t >= since:
            if (e.detail.get("split") or {}).get(key) == value:
                return e.t
    return None


def _good(r: StreamRecord, ttft_slo_s: float | None) -> bool:
    if r.outcome != Outcome.COMPLETE:
        return False
    return ttft_slo_s is None or (r.ttft_s is not None and r.ttft_s <= ttft_slo_s)


@dataclass
class Step:
    """One step's judgement. status: pass, fail, or cannot_tell (too few streams)."""

    percent: float
    start: float
    end: float
    requests: int = 0  # streams sent in the window, traced to a version
    untraced: int = 0
    candidate: int = 0
    share: float | None = None
    tolerance: float | None = None
    split_ok: bool | None = None  # None: no traced stream
    broken: int = 0  # the candidate's
    broken_outcomes: list[str] = field(default_factory=list)
    compared: dict = field(default_factory=dict)  # figure -> {"change", "said"}
    reasons: list[str] = field(default_factory=list)  # why the candidate fails this step
    unknown: list[str] = field(default_factory=list)  # what could not be told
    against: str = "the baseline's streams in the window"

    def has_enough(self, min_samples: int) -> bool:
        """Whether the step holds the streams its weight needs: min_samples / weight (as
        many as give the candidate min_samples, expected), and min_samples of them the
        candidate's. The count of all the streams says nothing of the split; ended when
        the candidate alone reached min_samples, a step ends early exactly when the
        candidate drew more than its share (a 10% step gave it 12 of 51 streams), and
        judged a fair split wrong 6 times in 1,000 at 10%, against 1 with this rule
        (benchmarks/bench_weighted_steps)."""
        needed = math.ceil(min_samples * 100 / self.percent - 1e-9)
        return self.requests >= needed and self.candidate >= min_samples

    @property
    def status(self) -> str:
        if self.reasons or self.split_ok is False:
            return "fail"
        if self.unknown:
            return "cannot_tell"
        return "pass"

    def split_text(self) -> str:
        if self.share is None:
            return f"{self.percent:g}%: no traced stream"
        return (
            f"{self.percent:g}%: {self.share:.0%} of {self.requests} "
            f"(within ±{self.tolerance * 100:.0f} points)"
            if self.split_ok
            else f"{self.percent:g}%: {self.share:.0%} of {self.requests}, off by more than "
            f"±{self.tolerance * 100:.0f} points"
        )

    def to_dict(self) -> dict:
        return {
            "percent": self.percent,
            "start": self.start,
            "end": self.end,
            "requests": self.requests,
            "untraced": self.untraced,
            "candidate": self.candidate,
            "share": self.share,
            "tolerance": self.tolerance,
            "split_ok": self.split_ok,
            "broken": self.broken,
            "compared": self.compared,
            "reasons": self.reasons,
            "unknown": self.unknown,
            "against": self.against,
            "status": self.status,
        }


def judge_step(
    window: Window,
    records: Sequence[StreamRecord],
    version: str,
    reference: Sequence[StreamRecord] = (),
    ttft_slo_s: float | None = None,
    min_sample: int = 20,
    client_delays: tuple[float | None, ...] = (),
) -> Step:
    """The step at `window`: of the streams sent in it and traced to a version, the share
    the candidate (`version`) served against the weight, and the candidate's streams
    against the baseline's: broken streams, goodput (TTFT SLO), TTFT and median ITL.
    reference: the baseline's streams before the steps, compared with where the window
    holds fewer than min_sample complete baseline streams (at 100% it holds none)."""
    step = Step(window.percent, window.start, window.end)
    sent = [r for r in records if window.start <= r.sent_at < window.end]
    traced = [r for r in sent if r.version is not None]
    step.untraced = len(sent) - len(traced)
    cand = [r for r in traced if r.version == version]
    base = [r for r in traced if r.version != version]
    step.requests, step.candidate = len(traced), len(cand)
    if traced:
        expected = window.percent / 100
        step.share = len(cand) / len(traced)
        step.tolerance = split_tolerance(expected, len(traced))
        step.split_ok = abs(step.share - expected) <= step.tolerance
    bad = [r for r in cand if r.broken]
    step.broken = len(bad)
    step.broken_outcomes = sorted({str(r.outcome) for r in bad})
    if bad:
        step.reasons.append(
            f"{len(bad)} of the candidate's {len(cand)} streams broke "
            f"({', '.join(step.broken_outcomes)})"
        )
    complete = lambda rs: [r for r in rs if r.outcome == Outcome.COMPLETE]  # noqa: E731
    if len(complete(base)) < min_sample and reference:
        base = [r for r in reference if r.version is not None and r.version != version]
        step.against = "the baseline's streams before the steps"
    if len(cand) < min_sample:
        step.unknown.append(
            f"the candidate served {len(cand)} streams, fewer than {min_sample} to compare"
        )
        return step
    change, said = goodput_test(
        (sum(_good(r, ttft_slo_s) for r in base), len(base)),
        (sum(_good(r, ttft_slo_s) for r in cand), len(cand)),
    )
    step.compared["goodput"] = {"change": change, "said": said}
    if change == "worse":
        step.reasons.append(f"goodput worse than the baseline's ({said})")
    for metric, label in LATENCY:
        b = [getattr(r, metric) for r in complete(base) if getattr(r, metric) is not None]
        c = [getattr(r, metric) for r in complete(cand) if getattr(r, metric) is not None]
        change, said = latency_change(b, c, client_delays, min_sample)
        step.compared[label] = {
            "change": change,
            "said": said,
            "baseline_median_s": _median(b),
            "candidate_median_s": _median(c),
        }
        if change == "worse":
            step.reasons.append(
                f"{label} median {ms_text(_median(c))} against the baseline's {ms_text(_median(b))} "
                f"({said})"
            )
        elif said.startswith("cannot tell"):
            step.unknown.append(f"{label}: {said}")
    return step


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def ms_text(seconds: float | None) -> str:
    """A latency in whole milliseconds, or "unknown" (the checks' and report's text)."""
    return "unknown" if seconds is None else f"{seconds * 1000:.0f} ms"
