"""`rollcheck probe URL`: a few judged streams against any OpenAI-compatible server.

It ends and keeps what it has: an overall deadline (default from the SLOs and the answer
length) cancels the streams still open and records them; Ctrl-C and SIGTERM do the same,
write the records and the summary, and then end the command (130, 143). The output
folder is checked writable before the first request is sent.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from harness.checks import check_accounting, check_all_complete, check_ttft_slo
from harness.client import Cancel, chat_payload, make_client, redact, secrets_of, stream_request
from harness.files import check_destination, check_writable, write_atomic
from harness.signals import Terminated
from harness.streams import End, Outcome, StreamObserver, StreamRecord, Thresholds, write_jsonl
from harness.streams.summary import count_flags, count_outcomes, latency_summary
from harness.verdict import failed, inconclusive, passed, verdict

JOIN_AFTER_CANCEL_S = 5.0  # a cancelled stream's thread returns at once; this is a bound


def default_timeout_s(requests: int, concurrency: int, max_tokens: int | None, th: Thresholds):
    """Waves of requests, each allowed its TTFT (or the stall timeout) and one inter-token
    SLO (or a second) per token asked for."""
    waves = -(-requests // concurrency)
    per_token = th.itl_slo_s or 1.0
    return waves * ((th.ttft_slo_s or th.stall_timeout_s) + (max_tokens or 1024) * per_token)


def check_deadline(records: list[StreamRecord], timeout_s: float, cut: int):
    expected = f"every answer ends within the probe's {timeout_s:g} s"
    if not records:
        return inconclusive("probe_deadline", expected=expected, reason="no request was sent")
    if cut:
        bad = [r for r in records if r.outcome == Outcome.CANCELLED]
        hint = "the server kept streaming past the deadline; raise --timeout for longer answers"
        return failed(
            "probe_deadline",
            observed=f"{cut} streams still open",
            expected=expected,
            population="streams",
            bad=bad,
            hint=hint,
        )
    return passed(
        "probe_deadline",
        observed="all ended",
        expected=expected,
        population=f"{len(records)} streams",
    )


def chat_url(base_url: str) -> str:
    """The chat completions URL under a base URL (with or without /v1)."""
    url = base_url.rstrip("/")
    if not url.endswith("/chat/completions"):
        url += "/v1/chat/completions" if not url.endswith("/v1") else "/chat/completions"
    return url


class _Probe:
    """One probe's requests in flight: `concurrency` workers take the next request number
    until none is left or the probe is cancelled; each stream is recorded exactly once."""

    def __init__(self, url, requests, model, max_tokens, prompt, thresholds, headers):
        self.url, self.model, self.max_tokens, self.prompt = url, model, max_tokens, prompt
        self.thresholds, self.headers = thresholds, headers
        self.records: list[StreamRecord] = []
        self.lock = threading.Lock()
        self.cancel = Cancel()
        self.todo = iter(range(requests))
        self.sent = 0
        self.sent_total = 0
        # sent, not yet recorded; emptied when the records are final, so a late one is dropped
        self.open_streams: dict[str, StreamObserver] = {}
        # The workers count themselves out: the main thread waits on an Event, never in
        # Thread.join, which a Ctrl-C can leave believing a running thread has stopped
        # (CPython 3.11, bpo-45274's handler), so its streams would never be cancelled.
        self.running = 0
        self.all_ended = threading.Event()

    def started(self, obs: StreamObserver) -> None:
        with self.lock:
            self.open_streams[obs.request_id] = obs

    def keep(self, record: StreamRecord) -> None:
        with self.lock:
            if self.open_streams.pop(record.request_id, None) is not None:
                self.records.append(record)

    def worker(self, client) -> None:
        try:
            while not self.cancel.is_set():
                with self.lock:
                    i = next(self.todo, None)
                    if i is None:
                        return
                    self.sent += 1
                payload = chat_payload(self.model, f"{self.prompt} ({i})", self.max_tokens)
                stream_request(
                    client,
                    self.url,
                    payload,
                    self.thresholds,
                    headers=self.headers,
                    on_record=self.keep,
                    on_start=self.started,
                    cancel=self.cancel,
                )
        finally:
            with self.lock:
                self.running -= 1
                if self.running == 0:
                    self.all_ended.set()

    def run(self, concurrency: int, timeout_s: float) -> tuple[BaseException | None, int]:
        """Send every request (or until the deadline, Ctrl-C or SIGTERM); the
        interruption, if any, and how many streams the deadline cut."""
        stopped: BaseException | None = None
        cut = 0
        self.running = concurrency
        with make_client(self.thresholds.stall_timeout_s, concurrency) as client:
            # daemon threads: a stream that ignores its cancellation cannot hold the exit
            threads = [
                threading.Thread(target=self.worker, args=(client,), daemon=True)
                for _ in range(concurrency)
            ]
            deadline = time.monotonic() + timeout_s
            try:
                for t in threads:
                    t.start()
                self.all_ended.wait(max(0.0, deadline - time.monotonic()))
            except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM through harness.signals
                stopped = exc
            if not self.all_ended.is_set():
                with self.lock:
                    cut = self.sent - len(self.records)
                self.cancel.set()
                self.all_ended.wait(JOIN_AFTER_CANCEL_S)
            with self.lock:
                for obs in self.open_streams.values():  # a thread that did not return in time
                    t = time.time() - obs.sent_at
                    record = obs.finish(End.CANCELLED, t, "cancelled by the harness")
                    self.records.append(redact(record, secrets_of(self.headers)))
                self.open_streams.clear()
                self.records = sorted(self.records, key=lambda r: r.sent_at)
                self.sent_total = self.sent  # the records are final: so is the count
        return stopped, cut


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
    timeout_s: float | None = None,
) -> tuple[list[StreamRecord], dict]:
    check_writable(out)
    for name in ("records.jsonl", "summary.json"):
        check_destination(out / name)
    if timeout_s is None:
        timeout_s = default_timeout_s(requests, concurrency, max_tokens, thresholds)
    headers = {}
    if api_key_env and os.environ.get(api_key_env):
        headers["Authorization"] = f"Bearer {os.environ[api_key_env]}"
    probe = _Probe(chat_url(base_url), requests, model, max_tokens, prompt, thresholds, headers)
    stopped, cut = probe.run(concurrency, timeout_s)
    records = probe.records
    summary = probe_summary(
        base_url, records, probe.sent_total, thresholds, timeout_s, cut, stopped
    )
    write_jsonl(records, out / "records.jsonl")
    write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    if stopped is not None:
        raise stopped
    return records, summary


def probe_summary(
    base_url: str,
    records: list[StreamRecord],
    sent: int,
    thresholds: Thresholds,
    timeout_s: float,
    cut: int,
    stopped: BaseException | None,
) -> dict:
    """The probe's checks and its summary.json."""
    outcomes = count_outcomes(records)
    checks = [
        check_accounting(sent, records, sum(outcomes.values())),
        check_all_complete(records),
        check_ttft_slo(records, thresholds.ttft_slo_s),
    ]
    if stopped is None:
        checks.append(check_deadline(records, timeout_s, cut))
    else:
        reason = f"stopped by {stopped.args[0] if isinstance(stopped, Terminated) else 'Ctrl-C'}"
        checks.append(
            inconclusive("probe_finished", expected="every request sent and ended", reason=reason)
        )
    return {
        "scenario": "probe",
        "target": base_url,
        "verdict": verdict(checks),
        "requests": len(records),
        "sent": sent,
        "ended": "interrupted" if stopped else "deadline" if cut else "done",
        "timeout_s": timeout_s,
        "outcomes": outcomes,
        "flags": count_flags(records),
        "gateway": None,  # a probe reads no gateway logs
        "latency": latency_summary(records),
        "checks": [c.to_dict() for c in checks],
    }


def format_table(summary: dict) -> str:
    lines = [f"{summary['target']}: {summary['requests']} requests, verdict {summary['verdict']}"]
    if summary.get("ended") == "deadline":
        lines.append(f"  stopped at the {summary['timeout_s']:g} s deadline (--timeout)")
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
