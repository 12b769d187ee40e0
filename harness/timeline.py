"""Actions, cluster events and stream records on one clock (epoch seconds).

Pure functions: which pod served a record (the gateway's upstream address, mapped
to the pod that held that address at the time), what happened to that pod while
the record streamed, when the disruption happened, how capacity moved.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from harness.events import Event, EventKind
from harness.gateway_logs import join_records, record_ids
from harness.streams import GatewayLine, StreamRecord

# What a scenario does to the target; the first one is "the disruption".
DISRUPTIVE_ACTIONS = {
    "rollout",
    "evict",
    "drain_node",
    "scale",
    "scale_down",
    "kill",
    "oom_request",
    "preempt",
    "node_loss",
    "adapter_load",
    "delete",
    "autoscaler",
    "load_step",
}
# Events that can break a stream on the pod they happen to.
BREAKING = (
    EventKind.ENDPOINT_REMOVED,
    EventKind.PRESTOP_STARTED,
    EventKind.SIGTERM,
    EventKind.SIGNAL,
    EventKind.SIGKILL,
    EventKind.EXITED,
)
# what ends an engine's streams itself
SIGNALS = (EventKind.SIGTERM, EventKind.SIGNAL, EventKind.SIGKILL, EventKind.EXITED)


@dataclass(frozen=True)
class Span:
    start: float
    end: float | None
    pod: str
    version: str | None
    node: str | None


@dataclass
class PodLife:
    """One pod's life as the target's events show it (epoch seconds; None: not seen)."""

    pod: str
    version: str | None
    node: str | None
    first_seen: float  # its first event of any kind
    created: float | None = None  # pod_created
    started: float | None = None  # its container's first start (the local target says so)
    readies: list[float] = field(default_factory=list)  # each ready, a restart's included
    terminating: float | None = None  # the first terminating
    removed: float | None = None  # pod_removed

    @property
    def ready(self) -> float | None:
        """Its first ready."""
        return self.readies[0] if self.readies else None

    @property
    def start(self) -> float | None:
        """Its start: creation, or its container's start where that came first (the local
        target's events), for a start-up's time."""
        times = [t for t in (self.created, self.started) if t is not None]
        return min(times) if times else None

    def ready_from(self, t: float) -> float | None:
        """Its first ready at or after t."""
        return next((r for r in self.readies if r >= t), None)

    @property
    def startup_s(self) -> float | None:
        """Its start to its first ready after it."""
        start = self.start
        ready = None if start is None else self.ready_from(start)
        return None if ready is None else ready - start


def pod_lives(events: Sequence[Event]) -> list[PodLife]:
    """Each pod the events name, in the order first seen, with its life: the one reading
    of pod lifecycles that the report's pod lanes, the checks (start-up, a rollout's
    measured pod times), a canary's candidates and the scaler's new replicas share."""
    lives: dict[str, PodLife] = {}
    for e in events:
        if not e.pod:
            continue
        life = lives.get(e.pod)
        if life is None:
            life = lives[e.pod] = PodLife(e.pod, e.version, e.node, e.t)
        life.version = life.version or e.version
        life.node = life.node or e.node
        if e.kind == EventKind.POD_CREATED and life.created is None:
            life.created = e.t
        elif e.kind == EventKind.CONTAINER_STARTED and life.started is None:
            life.started = e.t
        elif e.kind == EventKind.READY:
            life.readies.append(e.t)
        elif e.kind == EventKind.TERMINATING and life.terminating is None:
            life.terminating = e.t
        elif e.kind == EventKind.POD_REMOVED and life.removed is None:
            life.removed = e.t
    return list(lives.values())


def address_spans(events: Sequence[Event]) -> dict[str, list[Span]]:
    """address -> who held it when, from pod_created (address) and pod_removed."""
    open_spans: dict[str, tuple[str, float, str | None, str | None]] = {}
    spans: dict[str, list[Span]] = {}
    for ev in events:
        if ev.kind == EventKind.POD_CREATED and ev.detail.get("address"):
            open_spans[ev.pod] = (ev.detail["address"], ev.t, ev.version, ev.node)
        elif ev.kind == EventKind.POD_REMOVED and ev.pod in open_spans:
            addr, t0, version, node = open_spans.pop(ev.pod)
            spans.setdefault(addr, []).append(Span(t0, ev.t, ev.pod, version, node))
    for pod, (addr, t0, version, node) in open_spans.items():
        spans.setdefault(addr, []).append(Span(t0, None, pod, version, node))
    return spans


def host_of(address: str | None) -> str | None:
    """The IP of an `ip:port` (or `[v6]:port`) address; the address itself without a port."""
    if not address:
        return None
    if address.startswith("["):
        return address[1:].split("]", 1)[0]
    host, sep, port = address.rpartition(":")
    return host if sep and port.isdigit() and ":" not in host else address


def _held(spans: list[Span], t: float) -> list[Span]:
    return [s for s in spans if s.start <= t + 1 and (s.end is None or t <= s.end + 1)]


TRACED_BY_ADDRESS = "gateway log"
TRACED_BY_IP = "gateway log, by pod IP"


def trace(spans: dict[str, list[Span]], address: str | None, t: float):
    """Who held the address at t, and how it was told (TRACED_BY_*). A gateway may dial a
    port other than the engine's (a sidecar's, or a Service's named targetPort on another
    container): a pod IP names the pod, so with no exact match the one pod holding that
    IP at t is taken (never a guess between several, as on the local target, where every
    engine is on 127.0.0.1)."""
    exact = _held(spans.get(address or "", []), t)
    if exact:
        return exact[0], TRACED_BY_ADDRESS
    host = host_of(address)
    if host is None:
        return None, None
    by_ip = {s.pod: s for a, held in spans.items() if host_of(a) == host for s in _held(held, t)}
    if len(by_ip) == 1:
        return next(iter(by_ip.values())), TRACED_BY_IP
    return None, None


_FP = re.compile(r"^fp_(.+)$")


TRACED_BY_ENGINE_LOG = "engine log"


def correlate(
    records: Sequence[StreamRecord],
    access: Sequence[GatewayLine],
    events: Sequence[Event],
    served_by: Mapping[str, str] | None = None,
) -> int:
    """Fill record.gateway, .pod and .version; return how many records the gateway logged.
    served_by (request id -> pod, from the engines' own request logs) traces what the
    gateway's lines do not."""
    matched = join_records(list(records), list(access))
    spans = address_spans(events)
    versions = {ev.pod: ev.version for ev in events if ev.kind == EventKind.POD_CREATED and ev.pod}
    for r in records:
        addr = r.gateway.upstream_addr if r.gateway is not None else None
        span, how = trace(spans, addr, r.sent_at)
        if span is not None:
            r.pod, r.version, r.traced_by = span.pod, span.version, how
        elif served_by:
            pod = next((served_by[i] for i in record_ids(r) if i in served_by), None)
            if pod is not None:
                r.pod, r.version, r.traced_by = pod, versions.get(pod), TRACED_BY_ENGINE_LOG
        if r.version is None and r.system_fingerprint:
            m = _FP.match(r.system_fingerprint)
            r.version = m.group(1) if m else r.system_fingerprint
    return matched


def pods_ready_of(events: Sequence[Event], version: str, since: float, until: float) -> list[str]:
    """The pods of `version` that were ready at some time from `since` to `until` (a
    canary's candidates while its answers were compared): ready before `until`, and
    not removed before `since`."""
    return sorted(
        life.pod
        for life in pod_lives(events)
        if life.version == version
        and life.ready is not None
        and life.ready <= until
        and (life.removed is None or life.removed >= since)
    )


def steady_state_time(events: Sequence[Event]) -> float | None:
    """When the scenario recorded its steady state as reached."""
    return next(
        (
            ev.t
            for ev in events
            if ev.kind == EventKind.ACTION and ev.detail.get("action") == "steady_state"
        ),
        None,
    )


def disruption_time(events: Sequence[Event]) -> float | None:
    """The first disruptive action once the steady state was reached (preparing the
    target, such as scaling down before a scale-up test, does not count)."""
    steady = steady_state_time(events)
    for ev in events:
        if (
            ev.kind == EventKind.ACTION
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
    before it; a pod already terminating when the request was sent counts too), except
    that an endpoint removal or a preStop after a signal or an exit is its consequence,
    not its cause (the SIGKILL at +0.00 s, not the endpoint removed at +0.01 s).
    A stream not traced to a pod is tied to a victim's breaking event only if that
    event happened while the stream was in flight."""
    end = record.ended_at + 0.05
    if record.pod is not None:
        found = None
        for ev in events:
            if ev.pod != record.pod or ev.t > end:
                continue
            if ev.kind == EventKind.READY and ev.t < record.sent_at:
                found = None  # a restarted container: what broke it before is history
            elif ev.kind in BREAKING:
                if found is not None and found.kind in SIGNALS and ev.kind not in SIGNALS:
                    continue  # what followed the signal: the gateway and the hook catching up
                found = ev
        return found
    inside = [
        ev
        for ev in events
        if ev.pod in victims and ev.kind in BREAKING and record.sent_at - 0.05 <= ev.t <= end
    ]
    # prefer the signal itself over the endpoint removal or preStop that came before it
    signals = [ev for ev in inside if ev.kind in SIGNALS]
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


def replicas_writer(change: Event, events: Sequence[Event], within_s: float = 5.0) -> str:
    """Who changed the replica count: the field manager the Deployment named, else the
    scaler whose own record says it asked for that count within a few seconds (the HPA's
    status or SuccessfulRescale event, KEDA's event). Measured on kube-local (1.35): the
    count written through deployments/scale is often owned by no manager."""
    d = change.detail
    if d.get("by"):
        return d["by"]
    to, frm = d["replicas_to"], d["replicas_from"]
    near = sorted(
        (x for x in events if abs(x.t - change.t) <= within_s), key=lambda x: abs(x.t - change.t)
    )
    for x in near:
        msg = x.detail.get("message") or ""
        if x.kind == EventKind.SCALER_STATUS and x.detail.get("desired") == to:
            return f"HorizontalPodAutoscaler/{x.detail.get('hpa')}"
        if x.kind != EventKind.K8S_EVENT:
            continue
        if x.detail.get("object") == "HorizontalPodAutoscaler" and f"New size: {to};" in msg:
            return f"HorizontalPodAutoscaler/{x.detail.get('name') or '?'}"
        if x.detail.get("object") == "ScaledObject" and f"from {frm} to {to}" in msg:
            return f"KEDA (ScaledObject/{x.detail.get('name') or '?'})"
    return "a writer nothing names"


def count_decisions(events: Sequence[Event]) -> list[tuple[Event, str]]:
    """Each replica count the target itself changed, labelled for the timeline: the
    local autoscaler's decisions, and each Deployment replicas change on a cluster with
    the writer that made it ("KEDA (ScaledObject/x): replicas 1 -> 0")."""
    out = []
    for e in events:
        d = e.detail
        if e.kind == EventKind.SCALE and str(d.get("by", "")).startswith("autoscaler"):
            out.append(
                (e, f"{d['by']}: replicas {d.get('replicas_from')} -> {d.get('replicas_to')}")
            )
        elif e.kind in (EventKind.REPLICAS_CHANGED, EventKind.SCALER_FOUGHT):
            who = replicas_writer(e, events)
            out.append((e, f"{who}: replicas {d['replicas_from']} -> {d['replicas_to']}"))
    return out


def scaler_timeline(events, t0: float | None) -> list[dict]:
    """The scaler's decisions for a report: each desired-replicas status of an HPA, each
    replica count the cluster set, each fight, on the scenario's clock (t0), in order."""
    rows = []
    for e in events:
        if e.kind == EventKind.SCALER_STATUS:
            what = f"{e.detail['hpa']} wants {e.detail['desired']} (has {e.detail['current']})"
            if e.detail.get("metrics"):
                what += ": " + ", ".join(e.detail["metrics"])
            if e.detail.get("limited"):
                what += f"; limited: {e.detail['limited']}"
        elif e.kind in (EventKind.REPLICAS_CHANGED, EventKind.SCALER_FOUGHT):
            d = e.detail
            what = (
                f"{replicas_writer(e, events)} set replicas {d['replicas_from']} -> "
                f"{d['replicas_to']}"
            )
            if e.kind == EventKind.SCALER_FOUGHT:
                against = (
                    f"the count the harness held ({d['held']})"
                    if d.get("held") is not None
                    else "the harness's rollout"
                )
                what += f", against {against}"
        elif e.kind == EventKind.K8S_EVENT and e.detail.get("object") in (
            "ScaledObject",
            "HorizontalPodAutoscaler",
        ):
            what = f"{e.detail['object']} {e.detail.get('reason')}: {e.detail.get('message')}"
        elif e.kind == EventKind.SCALE and str(e.detail.get("by", "")).startswith("autoscaler"):
            # the local target's autoscaler deciding (scale_to_zero's removal)
            d = e.detail
            what = f"the {d['by']} set replicas {d.get('replicas_from')} -> {d.get('replicas_to')}"
        elif e.kind == EventKind.ACTION and e.detail.get("action") == "scaler_removed":
            held = e.detail.get("busy")
            busy = (
                ""
                if held is None
                else (", the replica with the long answer" if held else ", an idle replica")
            )
            what = f"the ReplicaSet removed {e.pod}{busy}: {e.detail.get('why')}"
        elif e.kind == EventKind.ACTION and e.detail.get("action") in (
            "autoscaler",
            "scaler_watch",
        ):
            mode = e.detail.get("mode") or e.detail.get("policy")
            what = "the count handed to the scaler" + (f" ({mode})" if mode else "")
        else:
            continue
        rows.append({"t": e.t, "at_s": None if t0 is None else round(e.t - t0, 2), "what": what})
    return rows


def scaler_summary(
    events: Sequence[Event], t0: float | None, since: float | None = None
) -> dict | None:
    """The scaler's part of a run: its decisions (scaler_timeline) from `since` (the load's
    start: older cluster events come back when a watch lists them), and after a load
    step when it first asked for more replicas and when each new replica was ready."""
    rows = scaler_timeline([e for e in events if since is None or e.t >= since], t0)
    if not rows:
        return None
    out: dict = {"timeline": rows}
    step = event_time(events, "action", action="load_step")
    if step is None:
        return out
    asked = next(
        (
            e.t
            for e in events
            if e.t >= step
            and (
                (e.kind == EventKind.SCALER_STATUS and (e.detail.get("desired") or 0) > (e.detail.get("current") or 0))
                or (e.kind == EventKind.REPLICAS_CHANGED and e.detail["replicas_to"] > e.detail["replicas_from"])
            )
        ),
        None,
    )  # fmt: skip
    out["asked_after_step_s"] = None if asked is None else round(asked - step, 2)
    ready = []
    for life in pod_lives(events):
        at = life.ready_from(step)
        if life.created is not None and life.created >= step - 1.0 and at is not None:
            ready.append({"pod": life.pod, "ready_after_step_s": round(at - step, 2)})
    out["new_replicas"] = sorted(ready, key=lambda r: r["ready_after_step_s"])
    return out
