"""`rollcheck probe URL`: a few judged streams against any OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.checks import check_accounting, check_all_complete, check_ttft_slo
from harness.client import chat_payload, make_client, stream_request
from harness.streams import Outcome, StreamRecord, Thresholds, write_jsonl
from harness.streams.summary import count_flags, count_outcomes, latency_summary
from harness.verdict import verdict


def run_probe(
    base_url: str,
    requests: int,
    concurrency: int,
    out: Path,
    model: str | None,
    max_tokens: int | None,
    thresholds: Thresholds,
    api_key_env: str | None,
    prompt: str = "Explain rolling updates in one paragraph.",
) -> tuple[list[StreamRecord], dict]:
    url = base_url.rstrip("/")
    if not url.endswith("/chat/completions"):
        url += "/v1/chat/completions" if not url.endswith("/v1") else "/chat/completions"
    headers = {}
    if api_key_env and os.environ.get(api_key_env):
        headers["Authorization"] = f"Bearer {os.environ[api_key_env]}"
    records: list[StreamRecord] = []
    lock = threading.Lock()
    sent = 0

    def one(i: int) -> None:
        nonlocal sent
        with lock:
            sent += 1
        payload = chat_payload(model, f"{prompt} ({i})", max_tokens)
        stream_request(client, url, payload, thresholds, headers=headers, on_record=keep)

    def keep(record: StreamRecord) -> None:
        with lock:
            records.append(record)

    with make_client(thresholds.stall_timeout_s, concurrency) as client:
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(one, range(requests)))
    records.sort(key=lambda r: r.sent_at)
    outcomes = count_outcomes(records)
    checks = [
        check_accounting(sent, records, sum(outcomes.values())),
        check_all_complete(records),
        check_ttft_slo(records, thresholds.ttft_slo_s),
    ]
    summary = {
        "scenario": "probe",
        "target": base_url,
        "verdict": verdict(checks),
        "requests": len(records),
        "outcomes": outcomes,
        "flags": count_flags(records),
        "gateway": None,  # a probe reads no gateway logs
        "latency": latency_summary(records),
        "checks": [c.to_dict() for c in checks],
    }
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(records, out / "records.jsonl")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return records, summary


def format_table(summary: dict) -> str:
    lines = [f"{summary['target']}: {summary['requests']} requests, verdict {summary['verdict']}"]
    for outcome, n in summary["outcomes"].items():
        if n or outcome == Outcome.COMPLETE:
            lines.append(f"  {outcome:<14} {n:>6}")
    for flag, n in summary["flags"].items():
        if n:
            lines.append(f"  flag {flag:<17} {n:>6}")
    lat = summary["latency"]["ttft_s"]
    if lat["n"]:
        lines.append(f"  TTFT p50 {lat['p50']:.3f} s  p99 {lat['p99']:.3f} s")
    for check in summary["checks"]:
        if check["status"] == "inconclusive":
            lines.append(f"  INCONCLUSIVE {check['name']}: {check['reason']}")
        elif check["status"] == "fail":
            lines.append(f"  FAILED {check['name']}: observed {check['observed']}")
            if check["hint"]:
                lines.append(f"    hint: {check['hint']}")
    return "\n".join(lines)
