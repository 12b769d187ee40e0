"""summary.json: the machine-readable twin of the report (schema in design.md)."""

from __future__ import annotations

import dataclasses

from harness.checks import goodput, health_during_drain
from harness.gateway_logs import gateway_summary
from harness.load_status import LoadStatus
from harness.secrets import is_secret_name
from harness.streams.summary import count_flags, count_outcomes, latency_summary
from harness.timeline import scaler_summary, version_share
from harness.verdict import attribution, verdict


def is_secret_key(key) -> bool:
    """A key whose value is redacted before anything is written (harness/secrets.py)."""
    return is_secret_name(key)


def redact(obj):
    """Drop credentials before anything is written."""
    if isinstance(obj, dict):
        return {k: ("[redacted]" if is_secret_key(k) and v else redact(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj


def phase_latency(data) -> dict:
    """TTFT / ITL / e2e percentiles before, during and after the disruption."""
    if data.t_act is None:
        return {"all": latency_summary(data.records)}
    return {p: latency_summary(recs) for p, recs in data.by_phase().items()}


def signals(data) -> dict:
    """The four signals every stream is checked for, per phase: [DONE], truncation,
    gateway 499s and TTFT SLO breaches (None where no gateway logs were read)."""
    status_by_id = {a.request_id: a.status for a in data.access}
    out = {}
    for p, recs in data.by_phase().items():
        out[p] = {
            "requests": len(recs),
            "missing_done": sum(r.outcome == "missing_done" for r in recs),
            "truncated": sum(r.outcome == "truncated" for r in recs),
            "gateway_499": (
                sum(status_by_id.get(r.request_id) == 499 for r in recs)
                if data.gateway_logs is not None
                else None
            ),
            "ttft_slo_breach": sum("ttft_slo_breach" in r.flags for r in recs),
            "no_first_token": sum(r.ttft_s is None and r.outcome != "cancelled" for r in recs),
        }
    return out


def build_summary(
    scenario, name, target, data, results, load_status, config, target_obj=None
) -> dict:
    records = data.records
    status = load_status or LoadStatus()
    lags = status.loop_lags_p99_s()
    return {
        "scenario": scenario,
        "name": name,
        "target": target,
        "verdict": verdict(results),
        "requests": len(records),
        "sent": data.sent,
        "outcomes": count_outcomes(records),
        "engine_counts": data.engine_counts,  # what the engines themselves counted
        "flags": count_flags(records),
        "goodput": goodput(data),
        "signals": signals(data),
        "gateway": gateway_summary(data.access, data.errors)
        | {"source": data.gateway_logs, "unparsed_lines": data.unparsed_gateway_lines},
        "attribution": attribution(data),
        "checks": [r.to_dict() for r in results],
        "t_start": data.t_start,
        "t_act": data.t_act,
        "t_recovered": data.t_recovered,
        "t_end": data.t_end,
        "victims": data.victims,
        "victim_in_flight": data.victim_in_flight,
        "health_during_drain": health_during_drain(data.events),
        "slo": {
            "ttft_s": data.ttft_slo_s,
            "itl_s": data.itl_slo_s,
            "budgets": data.slo_budgets,
        },
        "latency": phase_latency(data),
        "versions": version_share(records),
        "load_generator": {
            "cpu_warning": status.cpu_warning,
            "loop_lag_p99_s": ((data.client_delay or {}).get("all") or {}).get("p99_s")
            or (max(lags) if lags else None),
            "workers": len(status.workers),
            # its own delay per phase and over the run ("all"): harness.client_delay
            "delay": data.client_delay,
            "delay_limit_s": data.client_delay_limit_s,
        },
        "lint": [f.to_dict() for f in (target_obj.lint_findings if target_obj else ())],
        "scaler": scaler_summary(data.events, data.t_act or data.t_start, since=data.t_start),
        "config": redact(dataclasses.asdict(config)),
        "config_changes": config_changes(config),
    }


def config_changes(config, limit: int = 40) -> list[str]:
    """What the run's config changes from the shipped defaults (rollcheck.yaml, else the
    built-in ones): "engine.shutdown_timeout_s: 8 -> 0", secrets never shown."""
    from harness.config import ConfigError
    from harness.config.schema import load_config

    try:
        base = dataclasses.asdict(load_config(None, []))
    except ConfigError:
        return []
    out: list[str] = []

    def walk(a, b, prefix: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b), key=str):
                walk(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else str(k))
        elif a != b:
            if is_secret_name(prefix.rsplit(".", 1)[-1]):
                out.append(f"{prefix}: changed")
            else:
                out.append(f"{prefix}: {_short(a)} -> {_short(b)}")

    walk(base, dataclasses.asdict(config), "")
    return out[:limit] + ([f"and {len(out) - limit} more"] if len(out) > limit else [])


def _short(value) -> str:
    text = _plain(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _plain(value) -> str:
    """A setting's value as its YAML says it (true, 0.5, [{tokens: 8, weight: 1}]), not
    Python's repr of it; nothing set or empty: unset, none."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_plain(v) for v in value) + "]" if value else "none"
    if isinstance(value, dict):
        inner = ", ".join(f"{k}: {_plain(v)}" for k, v in value.items())
        return "{" + inner + "}" if value else "none"
    return str(value)
