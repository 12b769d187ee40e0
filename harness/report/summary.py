"""summary.json: the machine-readable twin of the report (schema in design.md)."""

from __future__ import annotations

import dataclasses

from harness.gateway import gateway_summary
from harness.streams.summary import count_flags, count_outcomes, latency_summary
from harness.timeline import version_share

SECRET_KEYS = ("api_key", "authorization", "token", "password", "secret")


def redact(obj):
    """Drop anything that looks like a credential before it is written anywhere."""
    if isinstance(obj, dict):
        return {
            k: ("[redacted]" if any(s in str(k).lower() for s in SECRET_KEYS) and v else redact(v))
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj


def phase_latency(records, t_act, t_recovered) -> dict:
    """TTFT / ITL / e2e percentiles before, during and after the disruption."""
    if t_act is None:
        return {"all": latency_summary(records)}
    before = [r for r in records if r.sent_at < t_act]
    end = t_recovered if t_recovered is not None else float("inf")
    during = [r for r in records if t_act <= r.sent_at < end]
    after = [r for r in records if r.sent_at >= end]
    return {
        "before": latency_summary(before),
        "during": latency_summary(during),
        "after": latency_summary(after),
    }


def build_summary(
    scenario, name, target, data, results, load_status, config, target_obj=None
) -> dict:
    records = data.records
    passed = all(r.passed for r in results)
    workers = (load_status or {}).get("workers", {}) or {}
    lags = [w.get("loop_lag", {}).get("p99_s") for w in workers.values()]
    lags = [x for x in lags if x is not None]
    return {
        "scenario": scenario,
        "name": name,
        "target": target,
        "verdict": "pass" if passed else "fail",
        "requests": len(records),
        "sent": data.sent,
        "outcomes": count_outcomes(records),
        "flags": count_flags(records),
        "gateway": gateway_summary(data.access, data.errors),
        "checks": [r.to_dict() for r in results],
        "t_act": data.t_act,
        "t_recovered": data.t_recovered,
        "victims": data.victims,
        "latency": phase_latency(records, data.t_act, data.t_recovered),
        "versions": version_share(records),
        "load_generator": {
            "cpu_warning": bool((load_status or {}).get("cpu_warning")),
            "loop_lag_p99_s": max(lags) if lags else None,
            "workers": len(workers),
        },
        "lint": [f.to_dict() for f in getattr(target_obj, "lint_findings", [])],
        "config": redact(dataclasses.asdict(config)),
    }
