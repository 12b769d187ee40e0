"""Actions, cluster events and stream records on one clock (epoch seconds).

Pure functions: which pod served a record (the gateway's upstream address, mapped
to the pod that held that address at the time), what happened to that pod while
the record streamed, when the disruption happened, how capacity moved.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness.events import Event
from harness.gateway_logs import GatewayLine, join_records
from harness.streams import StreamRecord

# What a scenario does to the target; the first one is "the disruption".
DISRUPTIVE_ACTIONS = {
    "rollout",
    "evict",
    "drain_node",
    "scale",
    "scale_down",
    "kill",
    "delete",
    "autoscaler",
    "load_step",
}
# Events that can break a stream on the pod they happen to.
BREAKING = ("endpoint_removed", "prestop_started", "sigterm", "signal", "sigkill", "exited")


@dataclass(frozen=True)
class Span:
    start: float
    end: float | None
    pod: str
    version: str | None
    node: str | None


def address_spans(events: Sequence[Event]) -> dict[str, list[Span]]:
    """address -> who held it when, from pod_created (address) and pod_removed."""
    open_spans: dict[str, tuple[str, float, str | None, str | None]] = {}
    spans: dict[str, list[Span]] = {}
    for ev in events:
        if ev.kind == "pod_created" and ev.detail.get("address"):
            open_spans[ev.pod] = (ev.detail["address"], ev.t, ev.version, ev.node)
        elif ev.kind == "pod_removed" and ev.pod in open_spans:
            addr, t0, version, node = open_spans.pop(ev.pod)
            spans.setdefault(addr, []).append(Span(t0, ev.t, ev.pod, version, node))
    for pod, (addr, t0, version, node) in open_spans.items():
        spans.setdefault(addr, []).append(Span(t0, None, pod, version, node))
    return spans


def pod_at(spans: dict[str, list[Span]], address: str | None, t: float) -> Span | None:
    for span in spans.get(address or "", []):
        if span.start <= t + 1 and (span.end is None or t <= span.end + 1):
            return span
    return None


_FP = re.compile(r"^fp_(.+)$")


def correlate(
    records: Sequence[StreamRecord], access: Sequence[GatewayLine], events: Sequence[Event]
) -> int:
    """Fill record.gateway, .pod and .version; return how many records the gateway logged."""
    matched = join_records(list(records), list(access))
    spans = address_spans(events)
    for r in records:
        addr = (r.gateway or {}).get("upstream_addr")
        span = pod_at(spans, addr, r.sent_at)
        if span is not None:
            r.pod, r.version = span.pod, span.version
        if r.version is None and r.system_fingerprint:
            m = _FP.match(r.system_fingerprint)
            r.version = m.group(1) if m else r.system_fingerprint
    return matched


def steady_state_time(events: Sequence[Event]) -> float | None:
    """When the scenario recorded its steady state as reached."""
    return next(
        (
            ev.t
            for ev in events
            if ev.kind == "action" and ev.detail.get("action") == "steady_state"
        ),
        None,
    )


def disruption_time(events: Sequence[Event]) -> float | None:
    """The first disruptive action once the steady state was reached (preparing the
    target, such as scaling down before a scale-up test, does not count)."""
    steady = steady_state_time(events)
    for ev in events:
        if (
            ev.kind == "action"
            and ev.detail.get("action") in DISRUPTIVE_ACTIONS
            and (steady is None or ev.t >= steady)
        ):
            return ev.t
    return None


def event_time(events: Sequence[Event], kind: str, **match) -> float | None:
    for ev in events:
        if ev.kind == kind and all(
            (getattr(ev, k) if k in ("pod", "node", "version") else ev.detail.get(k)) == v
            for k, v in match.items()
        ):
            return ev.t
    return None


def breaking_event(
    record: StreamRecord, events: Sequence[Event], victims: Sequence[str] = ()
) -> Event | None:
    """The event that broke a stream: the last event on its pod that can break a stream,
    up to the moment the stream ended (the SIGTERM that aborted it, not the preStop
    before it; a pod already terminating when the request was sent counts too).
    A stream not traced to a pod is tied to a victim's breaking event only if that
    event happened while the stream was in flight."""
    end = record.ended_at + 0.05
    if record.pod is not None:
        found = None
        for ev in events:
            if ev.pod != record.pod or ev.t > end:
                continue
            if ev.kind == "ready" and ev.t < record.sent_at:
                found = None  # a restarted container: what broke it before is history
            elif ev.kind in BREAKING:
                found = ev
        return found
    inside = [
        ev
        for ev in events
        if ev.pod in victims and ev.kind in BREAKING and record.sent_at - 0.05 <= ev.t <= end
    ]
    # prefer the signal itself over the endpoint removal or preStop that came before it
    signals = [ev for ev in inside if ev.kind in ("sigterm", "signal", "sigkill", "exited")]
    return (signals or inside or [None])[0]


def version_share(records: Sequence[StreamRecord], bucket_s: float = 1.0) -> list[dict]:
    """Requests started per time bucket and version: how traffic moved between versions."""
    if not records:
        return []
    t0 = min(r.sent_at for r in records)
    buckets: dict[int, dict[str, int]] = {}
    for r in records:
        b = int((r.sent_at - t0) // bucket_s)
        buckets.setdefault(b, {})
        key = r.version or "?"
        buckets[b][key] = buckets[b].get(key, 0) + 1
    return [{"t": t0 + b * bucket_s, "versions": v} for b, v in sorted(buckets.items())]
