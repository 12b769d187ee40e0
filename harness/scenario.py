"""Scenario: steady state -> act -> observe -> judge, with the waiting done here.

A scenario file calls these steps and the target's actions; this module owns
the load, the polling, the join of records with gateway logs and cluster
events, the checks and the run folder.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from harness import checks as C
from harness.cluster import Target, TargetError
from harness.cluster.config import RunConfig, Strategy
from harness.gateway import attach_errors, read_access_log, read_error_log
from harness.load import LoadRun
from harness.plan import hpa_desired, plan_rollout
from harness.streams import Thresholds, write_jsonl
from harness.timeline import breaking_event, correlate, disruption_time

Check = Callable[[C.RunData], C.CheckResult]
STARTUP_OVERHEAD_S = 1.0  # process start and the first probes, on top of engine.startup_s


class ScenarioFailed(AssertionError):
    """The verdict is fail; the message is the short, readable account."""


class DryRun(Exception):
    """A dry run ends before judging: there is nothing to judge."""


class Scenario:
    def __init__(self, name: str, kind: str, cfg: RunConfig, target: Target, run_dir: Path):
        self.name, self.kind, self.cfg, self.target = name, kind, cfg, target
        self.run_dir = Path(run_dir)
        self.load: LoadRun | None = None
        self.victims: list[str] = []
        self.t_recovered: float | None = None
        self.predicted_rollout_s: float | None = None
        self.summary: dict | None = None
        self._load_started = 0.0
        self._health_stop = threading.Event()
        self._health_thread: threading.Thread | None = None

    @property
    def dry_run(self) -> bool:
        return bool(getattr(self.target, "dry_run", False))

    @property
    def thresholds(self) -> Thresholds:
        slo = self.cfg.slo
        return Thresholds(slo.stall_timeout_s, slo.ttft_s, slo.itl_s)

    # --- steady state --------------------------------------------------------------
    def steady_state(self, in_flight: int | None = None, **load_overrides) -> None:
        """Start the load, let it warm up, wait for streams in flight."""
        if self.dry_run:
            self.target.action("steady_state", dry_run=True)
            return
        settings = dataclasses.replace(self.cfg.load, **load_overrides)
        self.load = LoadRun(self.target.gateway_url, self.run_dir, settings, self.thresholds)
        self.load.preflight()
        self.load.start()
        self._load_started = time.monotonic()
        self._sleep(self.cfg.scenario.warmup_s)
        n = self.cfg.scenario.in_flight if in_flight is None else in_flight
        if n:
            self.load.wait_until_in_flight(n, timeout_s=60)
        self.target.action("steady_state", in_flight=self.load.counts()["in_flight"])

    def prepare_replicas(self, n: int) -> None:
        """Before the steady state: bring the deployment to n ready replicas."""
        self.target.scale(n)
        self.wait_recovered(replicas=n)
        self.t_recovered = None

    def busiest_pod(self):
        """The ready pod with the most streams in flight: the one to disturb."""
        if self.dry_run:
            return self.target.ready_pods()[0]
        return self.target.busiest_pod(self.cfg.scenario.in_flight, timeout_s=60)

    def disturb(self, *pods: str) -> None:
        """Name the pods the disruption is aimed at (for the in-flight checks)."""
        self.victims = list(pods)

    def wait_for_load_step(self) -> None:
        """Wait until the load shape's step happens, and mark it as the disruption."""
        if self.dry_run:
            self.target.action("load_step", users=self.cfg.scenario.step_users)
            return
        at = self._load_started + self.load.settings.step_at_s
        self._sleep(max(0.0, at - time.monotonic()))
        self.target.action("load_step", users=self.load.settings.step_users)

    def record_health(self, pod: str, period_s: float = 0.2) -> None:
        """Poll the pod's /health in the background until judged (drain behaviour)."""
        if self.dry_run:
            return

        def poll() -> None:
            while not self._health_stop.wait(period_s):
                status = self.target.pod_health(pod)
                if status is None and not any(p.name == pod for p in self.target.pods()):
                    return
                self.target.action("health_probe", pod=pod, status=status)

        self._health_thread = threading.Thread(target=poll, daemon=True, name="health")
        self._health_thread.start()

    @property
    def kill_signal(self) -> int:
        return signal.Signals[self.cfg.scenario.kill_signal]

    @property
    def step_users(self) -> int:
        return self.cfg.scenario.step_users

    def predict_rollout(self, max_surge: str, max_unavailable: str) -> None:
        """The planner's rollout time for these settings, for the rollout_duration check."""
        surge, unavailable = Strategy(max_surge, max_unavailable).resolve(self.cfg.replicas)
        e, pod = self.cfg.engine, self.cfg.pod
        ready_s = e.startup_s + STARTUP_OVERHEAD_S
        longest = max(s.tokens for s in self.cfg.load.max_tokens) * e.itl_s
        drain_s = pod.prestop_s + min(longest, e.shutdown_timeout_s)
        plan = plan_rollout(
            self.cfg.replicas,
            ready_s,
            drain_s,
            surge,
            unavailable,
            gpu_bound=self.cfg.strategy.gpu_bound,
            step_s=0.1,
        )
        self.predicted_rollout_s = plan.duration_s

    def autoscale_for_step(self) -> int:
        """React to the load step as an HPA on in-flight requests per replica would."""
        if self.dry_run:
            self.target.scale(self.cfg.replicas + 1)
            return self.cfg.replicas + 1
        self._sleep(self.cfg.scenario.hpa_sync_s)
        pods = self.target.ready_pods()
        busy = [self.target.pod_metrics(p.name) for p in pods]
        per_replica = sum(
            m.get("vllm:num_requests_running", 0) + m.get("vllm:num_requests_waiting", 0)
            for m in busy
        ) / max(1, len(pods))
        desired = hpa_desired(len(pods), per_replica, self.cfg.scenario.hpa_target_in_flight)
        self.target.scale(desired)
        return desired

    # --- observe -------------------------------------------------------------------
    def wait_rollout(self) -> None:
        self.wait_for(self.target.rollout_done, self.cfg.scenario.recovery_s, "the rollout")

    def wait_scaled_to_zero(self) -> None:
        if self.wait_for(
            lambda: not self.target.pods(), self.cfg.scenario.recovery_s, "zero replicas"
        ):
            self.t_recovered = time.time()

    def wait_recovered(self, replicas: int | None = None) -> None:
        """Wait (up to scenario.recovery_s) for the desired replicas, ready and served."""
        n = self.cfg.replicas if replicas is None else replicas
        try:
            self.target.wait_settled(n, self.cfg.scenario.recovery_s)
            self.t_recovered = time.time()
            self.target.action("recovered", replicas=n)
        except TargetError:
            self.t_recovered = None

    def wait_for(self, cond: Callable[[], bool], timeout_s: float, what: str) -> bool:
        try:
            self.target.wait_for(cond, timeout_s, what, poll_s=0.1)
            return True
        except TargetError:
            return False

    def cool_down(self) -> None:
        if not self.dry_run:
            self._sleep(self.cfg.scenario.cool_down_s)

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.load is not None:
                self.load._check_alive()
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    # --- judge ---------------------------------------------------------------------
    def judge(self, *checks: Check) -> dict:
        """Stop the load, join the three views of each request, run the checks,
        write the run folder; raise ScenarioFailed with a short account if any fail."""
        self._health_stop.set()
        if self.dry_run:
            planned = [e.detail for e in self.target.events() if e.kind == "action"]
            (self.run_dir / "plan.json").write_text(json.dumps(planned, indent=2, default=str))
            raise DryRun(
                f"dry run: {len(planned)} actions printed, none taken "
                f"(plan in {self.run_dir / 'plan.json'})"
            )
        result = self.load.stop()
        time.sleep(0.2)  # nginx logs a request when the client's connection closes
        events = self.target.events()
        access_path, error_path = self.target.gateway_logs()
        access, _ = read_access_log(access_path)
        errors = read_error_log(error_path)
        attach_errors(access, errors)
        records = result.records
        # Judge the load's requests only, not the harness's own polls through the gateway.
        ids = {r.request_id for r in records}
        access = [a for a in access if a.request_id in ids]
        conns = {a.connection for a in access}
        errors = [e for e in errors if e.connection is None or e.connection in conns]
        correlate(records, access, events)
        write_jsonl(records, self.run_dir / "records.jsonl")  # now with pod, version, gateway
        _, unavailable = self.cfg.strategy.resolve(self.cfg.replicas)
        data = C.RunData(
            records=records,
            events=events,
            access=access,
            errors=errors,
            sent=result.sent,
            replicas=self.cfg.replicas,
            max_unavailable=unavailable,
            stall_timeout_s=self.cfg.slo.stall_timeout_s,
            ttft_slo_s=self.cfg.slo.ttft_s,
            t_act=disruption_time(events),
            t_recovered=self.t_recovered,
            victims=self.victims,
            recovery_budget_s=self.cfg.scenario.recovery_s,
            ttft_attainment=self.cfg.scenario.ttft_slo_attainment,
            predicted_rollout_s=self.predicted_rollout_s,
        )
        results = [C.check_accounting(result.sent, records, result.outcome_total)]
        if result.problems:
            results[0].passed = False
            results[0].hint = "; ".join(result.problems)
        results += [check(data) for check in checks]
        from harness.report import write_run

        self.summary = write_run(self, data, results, result.status)
        if self.summary["verdict"] != "pass":
            raise ScenarioFailed(failure_message(self.summary, data))
        return self.summary


def failure_message(summary: dict, data: C.RunData, listed: int = 5) -> str:
    """The failed checks, outcome counts, the first offending requests and the hint."""
    t0 = data.t_act or (min((r.sent_at for r in data.records), default=0.0))
    by_id = {r.request_id: r for r in data.records}
    lines = [f"{summary['scenario']} on {summary['target']}: verdict FAIL"]
    counts = ", ".join(f"{k} {v}" for k, v in summary["outcomes"].items() if v)
    lines.append(f"  outcomes: {counts or 'no requests'}")
    for check in summary["checks"]:
        if check["passed"]:
            continue
        lines.append(
            f"  FAILED {check['name']}: observed {check['observed']}, expected {check['expected']}"
        )
        for rid in check["requests"][:listed]:
            r = by_id.get(rid)
            if r is None:
                lines.append(f"    {rid}")
                continue
            ev = breaking_event(r, data.events)
            cause = f"; {ev.kind} on {ev.pod} at {ev.t - t0:+.2f} s" if ev else ""
            lines.append(
                f"    {rid[:12]} {r.outcome:<13} pod {r.pod or '?'} ({r.version or '?'}) "
                f"{r.sent_at - t0:+.2f} s .. {r.ended_at - t0:+.2f} s, {r.tokens} tokens{cause}"
            )
        if len(check["requests"]) > listed:
            lines.append(f"    ... and {len(check['requests']) - listed} more")
        if check["hint"]:
            lines.append(f"    hint: {check['hint']}")
    lines.append(f"  report: {summary.get('report')}")
    return "\n".join(lines)
