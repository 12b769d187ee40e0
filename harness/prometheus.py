"""Prometheus text from an engine's /metrics, summed by metric name (over its labels):
one parser for the local and the Kubernetes target. A series with a `finished_reason`
label is also kept under `name[reason]` (vllm:request_success_total by ending), and a
histogram's bucket under `name[le=BOUND]` (harness.histograms reads them)."""

from __future__ import annotations

import re

_METRIC = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)$")
_REASON = re.compile(r'finished_reason="([^"]*)"')
_LE = re.compile(r'\ble="([^"]*)"')


def parse_metrics(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _METRIC.match(line.strip())
        if m:
            value = float(m.group(3))
            out[m.group(1)] = out.get(m.group(1), 0.0) + value
            labels = m.group(2) or ""
            reason = _REASON.search(labels)
            if reason:
                key = f"{m.group(1)}[{reason.group(1)}]"
                out[key] = out.get(key, 0.0) + value
            le = _LE.search(labels) if m.group(1).endswith("_bucket") else None
            if le:
                key = f"{m.group(1)}[le={le.group(1)}]"
                out[key] = out.get(key, 0.0) + value
    return out
