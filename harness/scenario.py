"""Scenario: steady state -> act -> observe -> judge.

A scenario file calls these steps, the target's actions and the parts the scenario is
built of: its disruption (the victims and the act until the target shows it), recovery
(the waits after it), versions (a rollout's candidate), preconditions (SKIPPED before
acting), witnesses (the engines' own counts) and scaler hand-over. This module owns the
load, the judge and the run folder; gathering joins the records with the gateway's
lines and the target's events.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

from harness import checks as C
from harness import client_delay
from harness import verdict as V
from harness.cluster.target import Target, TargetError
from harness.config.schema import RunConfig
from harness.disruption import Disruption
from harness.gathering import join, wait_logged
from harness.load import LoadError, LoadRun
from harness.load_status import LoadStatus
from harness.preconditions import Preconditions
from harness.progress import Progress
from harness.recovery import Recovery
from harness.scaler_handover import ScalerHandover
from harness.scenario_context import ScenarioContext
from harness.streams import Thresholds, write_jsonl
from harness.timeline import breaking_event, disruption_time, steady_state_time
from harness.versions import Versions
from harness.waits import T, hold, watched
from harness.witness import Witnesses

Check = Callable[[V.RunData], V.CheckResult]


class ScenarioFailed(AssertionError):
    """The verdict is fail or inconclusive; the message is the short, readable account."""


class DryRun(Exception):
    """A dry run ends before judging: there is nothing to judge."""


class Scenario:
    def __init__(
        self,
        name: str,
        kind: str,
        cfg: RunConfig,
        target: Target,
        run_dir: Path,
        progress: Progress | None = None,
        load_factory: Callable[..., LoadRun] = LoadRun,
    ):
        """load_factory: what sends the load (LoadRun; a dry run's sends nothing), called
        as LoadRun(gateway_url, run_dir, settings, thresholds)."""
        self.name, self.kind, self.cfg, self.target = name, kind, cfg, target
        self.load_factory = load_factory
        self.run_dir = Path(run_dir)
        # phase lines and the status while waiting (the plugin's, started with the target)
        self.progress = progress or Progress(name, cfg.ui.progress_every_s)
        self.progress.target = target
        self.load: LoadRun | None = None
        # load.workers: auto, as the session sized it for its engine (else LoadRun sizes it)
        self.load_workers: int | None = None
        self.t_start: float | None = None
        self.load_status: LoadStatus | None = None  # the load's own account of its end (gather)
        self.extras: dict = {}  # scenario-specific sections of summary.json (canary)
        ctx = ScenarioContext(
            target,
            cfg,
            self.progress,
            load=lambda: self.load,
            wait_for=self.wait_for,
            stop=self.inconclusive,
            steady_at=self._steady_at,
        )
        self.disruption = Disruption(ctx)
        self.recovery = Recovery(ctx, self.disruption)
        self.versions = Versions(ctx)
        self.preconditions = Preconditions(ctx, self.run_dir, kind, name)
        # the engines' own counts through the run, and a pod's /health where asked
        self.witnesses = Witnesses(target, cfg.scenario.engine_poll_s)
        # the replica count handed to the workload's own scaler (kube.scaler=cluster)
        self.scaler = ScalerHandover(
            target,
            cfg.scenario,
            let_pass=self.let_pass,
            wait_for=self.wait_for,
            stop=self.inconclusive,
            skip=self.preconditions.skip,
            in_flight=lambda: self.load.counts()["in_flight"],
        )

    @property
    def thresholds(self) -> Thresholds:
        slo = self.cfg.slo
        return Thresholds(slo.stall_timeout_s, slo.ttft_s, slo.itl_s, slo.max_event_bytes)

    # --- steady state --------------------------------------------------------------
    def steady_state(self, in_flight: int | None = None, **load_overrides) -> None:
        """Start the load, let it warm up, wait for streams in flight."""
        settings = dataclasses.replace(self.cfg.load, **load_overrides)
        if settings.workers == "auto" and self.load_workers is not None:
            settings = dataclasses.replace(settings, workers=self.load_workers)
        if self.cfg.scenario.warm_requests:
            longest = max(share.tokens for share in settings.prompt_tokens)
            self.target.warm_engines(self.cfg.scenario.warm_requests, settings.model, longest)
        self.load = self.load_factory(
            self.target.gateway_url, self.run_dir, settings, self.thresholds
        )
        self.load.preflight()
        self.witnesses.start_engine_counts()
        self.t_start = time.time()
        self.load.start()
        self.progress.load = self.load
        self.progress.phase(f"load started: {describe_load(settings)}")
        self.let_pass(self.cfg.scenario.warmup_s, "the warm-up")
        n = self.cfg.scenario.in_flight if in_flight is None else in_flight
        if n:
            try:
                self.load.wait_until_in_flight(n, timeout_s=self.cfg.scenario.steady_state_s)
            except LoadError as exc:
                self.inconclusive(f"steady state not reached: {exc}")
        streams = self.load.counts()["in_flight"]
        self.target.action("steady_state", in_flight=streams)
        self.progress.phase(f"steady state: {streams} streams in flight")

    def close(self) -> None:
        """End what the scenario started, however it ended (a verdict, an error, SIGTERM):
        the /health poll and the engine witness are stopped and joined (a thread left
        running at interpreter exit aborted a SIGTERMed run with status 134), the load
        stopped."""
        self.witnesses.close()
        if self.load is not None:
            self.load.close()

    def _steady_at(self) -> float:
        """When the steady state was reached (the start of the load before it is)."""
        steady = steady_state_time(self.target.events())
        return steady if steady is not None else self.t_start or 0.0

    def wait_for(self, cond: Callable[[], T], timeout_s: float, what: str) -> T | None:
        """cond()'s first truthy value within timeout_s, or None when it never came."""
        try:
            return self.target.wait_for(cond, timeout_s, what, poll_s=0.1) or None
        except TargetError:
            return None

    def cool_down(self, seconds: float | None = None) -> None:
        """Keep the load running after recovery (scenario.cool_down_s by default)."""
        seconds = self.cfg.scenario.cool_down_s if seconds is None else seconds
        self.progress.phase(f"cool-down: {seconds:g} s more of load")
        self.let_pass(seconds, "the cool-down")

    def hold(self, seconds: float, what: str) -> None:
        """Keep the load running while `what` lasts (a phase line says so)."""
        self.progress.phase(f"{what}: {seconds:g} s")
        self.let_pass(seconds, what)

    def let_pass(self, seconds: float, what: str = "time to pass") -> None:
        """Let time pass with the load on (ended early if the load dies)."""
        if self.load is not None:
            self.load.hold(seconds, what)
        else:
            hold(seconds, what=what)

    def inconclusive(self, reason: str, stage: str = "steady_state"):
        """End the scenario early, with the reason: INCONCLUSIVE, unless a stream broke.
        No ending hides a broken stream: every stream sent so far is judged by the shared
        stream checks, and one broken makes the verdict FAIL, its account saying both what
        broke and why the scenario stopped (stage: "steady_state" before acting,
        "disruption" when the act went otherwise than planned). Raises ScenarioFailed."""
        if stage == "steady_state":
            expected = f"{self.cfg.scenario.in_flight} streams in flight"
        else:
            expected = "the disruption made as planned"
        stopped = V.inconclusive(stage, expected=expected, reason=reason)
        self.judge(lambda d: stopped, hold_slo=False)
        raise AssertionError("unreachable: judge raises for an inconclusive verdict")

    def judge(
        self,
        *checks: Check,
        expect_broken_on_victims: bool = False,
        hold_slo: bool = True,
        slo_required: tuple[str, ...] = ("during",),
        slo_phases: tuple[str, ...] = V.PHASES,
    ) -> dict:
        """Gather the run data, judge it with the shared stream checks and the scenario's
        own, write the run folder; raise ScenarioFailed with a short account unless the
        verdict is pass.

        expect_broken_on_victims: the disturbed pods' own streams may break (pod_kill);
        hold_slo: hold the run to its SLO budgets (not when it stopped early);
        slo_required: the phases that must hold requests for the SLO budgets to be
        evidence; slo_phases: the phases held to a budget."""
        data = self.gather(expect_broken_on_victims)
        shared = C.shared_checks(
            data,
            expect_broken_on_victims=expect_broken_on_victims,
            hold_slo=hold_slo,
            slo_required=slo_required,
            slo_phases=slo_phases,
        )
        results = V.judge(data, [*shared, *checks])
        summary = self.write(data, results)
        self.progress.phase(f"verdict {summary['verdict'].upper()}")
        if summary["verdict"] != "pass":
            said = (summary.get("calibration") or {}).get("warnings") or []
            raise ScenarioFailed(
                V.failure_message(
                    results,
                    data,
                    f"{self.kind} on {self.target.name}",
                    summary.get("report"),
                    said,
                    breaking_event,
                )
            )
        return summary

    def gather(self, expect_broken_on_victims: bool = False) -> V.RunData:
        """Stop the load and join the three views of each request (the load's records,
        the gateway's lines, the target's events) into the run data; records.jsonl is
        rewritten with each request's pod, version and gateway line."""
        self.witnesses.stop_health()
        still_open = self.load.counts()["in_flight"]
        self.progress.phase(
            f"stopping the load: {still_open} streams still open (they may finish within "
            f"load.stop_timeout_s, {self.load.settings.stop_timeout_s:g} s)"
        )
        with watched("the load to stop", self.load.settings.stop_timeout_s + 30):
            result = self.load.stop()
        self.load_status = result.status
        witness = self.witnesses.stop_engine_counts()
        t_end = time.time()
        self.progress.phase(f"judging {len(result.records)} records")
        wait_logged(
            self.target, result.records, self.wait_for, self.cfg.scenario.gateway_log_wait_s
        )
        joined = join(result.records, self.target, self.run_dir)
        records, events = joined.records, joined.events
        write_jsonl(records, self.run_dir / "records.jsonl")  # now with pod, version, gateway
        _, unavailable = self.cfg.strategy.resolve(self.cfg.replicas)
        slo = self.cfg.slo
        data = V.RunData(
            records=records,
            events=events,
            access=joined.access,
            errors=joined.errors,
            sent=result.sent,
            replicas=self.cfg.replicas,
            max_unavailable=unavailable,
            stall_timeout_s=slo.stall_timeout_s,
            ttft_slo_s=slo.ttft_s,
            itl_slo_s=slo.itl_s,
            slo_budgets={"ttft": slo.ttft_budget.as_dict(), "itl": slo.itl_budget.as_dict()},
            t_act=disruption_time(events),
            t_recovered=self.recovery.t_recovered,
            t_start=self.t_start,
            t_end=t_end,
            victims=self.disruption.victims,
            victim_in_flight=self.disruption.victim_in_flight,
            recovery_budget_s=self.cfg.scenario.recovery_s,
            lost_node_routing_s=self.cfg.scenario.lost_node_routing_s,
            scaler_idle_s=self.cfg.autoscaler.idle_s,
            gateway_logs=joined.access_log,
            engine_logs=joined.engine_logs,
            unparsed_gateway_lines=joined.unparsed.count,
            first_unparsed_line=joined.unparsed.first,
            expect_broken_on_victims=expect_broken_on_victims,
            outcome_total=result.outcome_total,
            load_problems=list(result.problems),
        )
        if witness is not None:
            data.engine_counts = witness.as_dict(data.t_act)
        windows = client_delay.read(self.run_dir)
        data.client_delay = client_delay.by_phase(windows, data.phases.at) or None
        data.client_delay_share = slo.client_delay_share
        return data

    def write(self, data: V.RunData, results: list) -> dict:
        """Write the run folder (records, report, summary) and return the summary."""
        from harness.report import write_run

        self.progress.t_end = time.time()
        self.extras["timing"] = self.progress.timing()
        return write_run(self, data, results, self.load_status)


def describe_load(s) -> str:
    """The load's shape in a few words, for the phase line that starts it."""
    if s.shape == "rate":
        text = f"{s.rate_rps:g} requests/s"
    elif s.shape == "step":
        text = f"{s.users} users, {s.step_users} from +{s.step_at_s:g}s"
    else:
        text = f"{s.users} users"
    if s.long_answer_user:
        text += f" and one long answer ({s.long_answer_tokens} tokens)"
    if s.web_ui:
        text += f"; Locust's web UI at http://{s.web_ui}"
    return text
