"""`rollcheck ...`: one subcommand per module, each registering its own options."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

from harness.config import ConfigError
from harness.errors import RollcheckError
from harness.signals import exit_code
from harness.waits import hold


class UsageError(RollcheckError):
    """Bad input from the user: printed as one line, exit 2."""


def _sim(sub: argparse._SubParsersAction) -> None:
    from harness.sim import settings

    p = sub.add_parser("sim", help="run the vLLM-compatible engine simulator")
    settings.add_arguments(p)

    def run(ns: argparse.Namespace) -> int:
        from harness.sim.server import run as run_sim

        s = settings.from_namespace(ns)
        try:
            s.validate()
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return run_sim(s)

    p.set_defaults(func=run)


def _add_api_key(p: argparse.ArgumentParser, more: str = "") -> None:
    p.add_argument(
        "--api-key",
        metavar="ENV_VAR",
        default=None,
        help="name of the environment variable holding the API key, sent on every request "
        f"(never written to disk){more}",
    )


def _check_api_key(ns: argparse.Namespace) -> None:
    if ns.api_key and ns.api_key not in os.environ:
        raise UsageError(f"--api-key names ${ns.api_key}, which is not set")


def _check_url(url: str, name: str) -> None:
    from harness.urls import url_problem

    problem = url_problem(url)
    if problem is not None:
        raise UsageError(f"{name}: {problem}")


MAX_REQUESTS = 1_000_000
MAX_CONCURRENCY = 1000


def _out_folder(folder: Path, option: str, page: Path | None = None) -> None:
    """The folder a command will write into exists (or is made) and is writable: one
    line naming the option and the path otherwise, before any work is done."""
    named = page if page is not None else folder
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"{option} {named}: cannot make the folder {folder} ({exc.strerror or exc}); give "
            "a path in a writable folder"
        ) from None
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {named}: {folder} is not a writable folder")


def _positive_seconds(ns: argparse.Namespace, name: str) -> None:
    """A duration option: absent, or a finite number above zero (NaN and inf refused)."""
    value = getattr(ns, name)
    if value is not None and not (math.isfinite(value) and value > 0):
        raise UsageError(
            f"--{name.replace('_', '-')} must be a positive number of seconds, not {value}"
        )


def _probe(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("probe", help="stream a few judged requests to any OpenAI-compatible URL")
    p.add_argument("url", help="base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("-n", "--requests", type=int, default=10, help="requests to send (default 10)")
    p.add_argument(
        "-c", "--concurrency", type=int, default=2, help="requests in flight at once (default 2)"
    )
    p.add_argument(
        "--out", type=Path, default=None, help="output folder (default reports/probe-<time>)"
    )
    p.add_argument("--model", default=None, help="model name to request (default: server's)")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens each answer asks for (64)")
    p.add_argument("--stall-timeout", type=float, default=30.0, help="seconds without data")
    p.add_argument("--ttft-slo", type=float, default=None, help="TTFT SLO in seconds")
    p.add_argument("--itl-slo", type=float, default=None, help="inter-token SLO in seconds")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="overall deadline in seconds; streams still open then are cancelled and recorded "
        "(default: per wave of requests, the TTFT SLO or stall timeout plus the ITL SLO, or 1 s, "
        "per token asked for)",
    )
    p.add_argument(
        "--max-event-bytes",
        type=int,
        default=None,
        help="an SSE event or line over this size makes the stream not_sse (default 1 MiB)",
    )
    _add_api_key(p)

    def run(ns: argparse.Namespace) -> int:
        from harness.probe import format_table, run_probe
        from harness.streams import Thresholds
        from harness.streams.sse import MAX_EVENT_BYTES, event_limit_problem

        if not 1 <= ns.requests <= MAX_REQUESTS or not 1 <= ns.concurrency <= MAX_CONCURRENCY:
            raise UsageError(
                f"--requests must be 1 to {MAX_REQUESTS} and --concurrency 1 to {MAX_CONCURRENCY}"
            )
        _check_url(ns.url, "the URL")
        _check_api_key(ns)
        for name in ("stall_timeout", "ttft_slo", "itl_slo", "timeout"):
            _positive_seconds(ns, name)
        if ns.max_tokens is not None and not 1 <= ns.max_tokens <= 10_000_000:
            raise UsageError(f"--max-tokens must be 1 to 10000000, not {ns.max_tokens}")
        events = ns.max_event_bytes
        if events is not None and event_limit_problem(events):
            raise UsageError(f"--max-event-bytes {event_limit_problem(events)}")
        out = ns.out or Path("reports") / time.strftime("probe-%Y%m%d-%H%M%S")
        th = Thresholds(ns.stall_timeout, ns.ttft_slo, ns.itl_slo, events or MAX_EVENT_BYTES)
        _, summary = run_probe(
            ns.url,
            ns.requests,
            ns.concurrency,
            out,
            ns.model,
            ns.max_tokens,
            th,
            ns.api_key,
            timeout_s=ns.timeout,
        )
        print(format_table(summary))
        print(f"records and summary: {out}")
        return 0 if summary["verdict"] == "pass" else 1

    p.set_defaults(func=run)


def _load_thresholds(slo):
    """The slo: section of `rollcheck load` (stall_timeout_s, ttft_s, itl_s), strictly."""
    from harness.streams import Thresholds
    from harness.streams.sse import MAX_EVENT_BYTES, event_limit_problem

    slo = {} if slo is None else slo
    if not isinstance(slo, dict):
        raise UsageError(f"slo: must be a mapping such as {{ttft_s: 1.5}}, not {slo!r}")
    known = ("stall_timeout_s", "ttft_s", "itl_s", "max_event_bytes")
    unknown = sorted(set(slo) - set(known))
    if unknown:
        raise UsageError(f"unknown setting 'slo.{unknown[0]}'; known here: {', '.join(known)}")
    for key, value in slo.items():
        if key == "max_event_bytes":
            if event_limit_problem(value):
                raise UsageError(f"slo.max_event_bytes {event_limit_problem(value)}")
            continue
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value <= 0
        ):
            raise UsageError(f"slo.{key} must be a positive number of seconds, not {value!r}")
    return Thresholds(
        float(slo.get("stall_timeout_s") or 30),
        slo.get("ttft_s"),
        slo.get("itl_s"),
        slo.get("max_event_bytes") or MAX_EVENT_BYTES,
    )


def _load(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("load", help="run judged streaming load (Locust) against a URL for a while")
    p.add_argument("url", help="base URL of the gateway or engine")
    p.add_argument("--config", type=Path, default=None, help="YAML with a load: section")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting, e.g. load.users=32 (repeatable)",
    )
    p.add_argument("--duration", type=float, default=30.0, help="seconds of load")
    p.add_argument(
        "--out", type=Path, default=None, help="run folder (default reports/load-<time>)"
    )
    _add_api_key(p, "; the same as load.api_key_env")

    def run(ns: argparse.Namespace) -> int:
        from harness.config import apply_sets, build, load_yaml
        from harness.config.load import LoadSettings
        from harness.load import LoadError, LoadRun
        from harness.streams.summary import count_outcomes

        _check_url(ns.url, "the URL")
        data = apply_sets(load_yaml(ns.config) if ns.config else {}, ns.set)
        unknown = sorted(set(data) - {"load", "slo"})
        if unknown:
            raise UsageError(f"unknown section {unknown[0]!r}; rollcheck load reads load: and slo:")
        if ns.api_key:
            data.setdefault("load", {})
            if not isinstance(data["load"], dict):
                raise UsageError("load: must be a mapping of settings")
            data["load"]["api_key_env"] = ns.api_key
        _positive_seconds(ns, "duration")
        settings = build(LoadSettings, data.get("load"), "load")
        th = _load_thresholds(data.get("slo"))
        out = ns.out or Path("reports") / time.strftime("load-%Y%m%d-%H%M%S")
        load = LoadRun(ns.url, out, settings, th)
        if load.sizing is not None:
            print(f"rollcheck: {load.sizing.why}", flush=True)
        stopped: KeyboardInterrupt | None = None
        try:
            load.preflight()
            load.start()
            if settings.external_workers:
                print(
                    f"waiting for {settings.external_workers} external workers at "
                    f"{load.master_address} (locust --worker -f loadgen/locustfile.py "
                    f"--master-host HOST --master-port PORT); master log: "
                    f"{load.load_dir / 'master.log'}"
                )
            try:
                hold(ns.duration, alive=load._check_alive, interval_s=0.5)
            except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: keep what was sent
                stopped = exc
                print("stopping: the load's open streams end or are cancelled", flush=True)
            result = load.stop()
        except LoadError as exc:
            load.close()
            raise UsageError(str(exc)) from None
        counts = count_outcomes(result.records)
        print(f"{result.sent} requests: " + ", ".join(f"{k} {v}" for k, v in counts.items() if v))
        print(f"records: {out / 'records.jsonl'}")
        for problem in result.problems:
            print(f"rollcheck load: {problem}", file=sys.stderr)
        if stopped is not None:
            raise stopped
        return 0 if result.accounting_ok() else 1

    p.set_defaults(func=run)


def _config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="run config YAML (default: rollcheck.yaml at the repo root)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting, dotted keys, e.g. engine.shutdown_timeout_s=0",
    )


def _up(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("up", help="start the embedded local target in the foreground")
    _config_args(p)
    p.add_argument("--run-dir", type=Path, default=None, help="default reports/up-<time>")

    def run(ns: argparse.Namespace) -> int:

        from harness.cluster.local import LocalTarget
        from harness.cluster.local.nginx import GatewayError
        from harness.cluster.target import TargetError
        from harness.config.schema import load_config

        cfg = load_config(ns.config, ns.set)
        run_dir = ns.run_dir or Path("reports") / time.strftime("up-%Y%m%d-%H%M%S")
        target = LocalTarget(cfg, run_dir)
        try:
            target.start()
            target.wait_settled(cfg.replicas, timeout_s=120)
            print(
                f"gateway: {target.gateway_url}  (run folder {run_dir}; Ctrl-C stops)", flush=True
            )
            shown = None
            while True:
                states = sorted(
                    (
                        p.name,
                        p.version,
                        p.node,
                        p.address,
                        "terminating" if p.terminating else "ready" if p.ready else p.phase.lower(),
                    )
                    for p in target.pods()
                )
                if states != shown:
                    shown = states
                    print(time.strftime("%H:%M:%S"), "pods:", flush=True)
                    for name, version, node, address, state in states:
                        print(
                            f"  {name:<28} {version:<6} {node:<8} {address:<22} {state}", flush=True
                        )
                time.sleep(0.5)
        except (TargetError, GatewayError) as exc:
            raise UsageError(str(exc)) from None
        except KeyboardInterrupt as exc:
            print("stopping: pods and gateway", flush=True)
            return exit_code(exc, ctrl_c=0)
        finally:
            target.close()

    p.set_defaults(func=run)


def _canary(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "canary",
        help="compare a candidate's answers with a baseline's on golden prompts "
        "(exit 0 pass, 1 diverged, 2 bad input)",
    )
    p.add_argument("--baseline", required=True, help="the current version's replica, base URL")
    p.add_argument("--candidate", required=True, help="the new version's replica, base URL")
    p.add_argument(
        "--prompts",
        type=Path,
        default=None,
        help="JSON lines: prompt, optional expect (substrings) and max_tokens "
        "(default: a small shipped set)",
    )
    p.add_argument(
        "--mode",
        choices=("same", "new"),
        default="same",
        help="same: same weights, new engine (identical answers); new: new weights "
        "(judged against the baseline's distribution)",
    )
    p.add_argument(
        "--min-agreement",
        type=float,
        default=0.9,
        help="same mode: share of answers that must be identical (default 0.9)",
    )
    p.add_argument(
        "--agree-after-tokens",
        type=int,
        default=0,
        help="same mode: an answer identical for its first N tokens agrees too, for an "
        "engine whose greedy decoding is not batch-invariant (default 0: identical only)",
    )
    p.add_argument("--model", default=None, help="model name to request (default: server's)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help="prompts in flight per replica (default 4); 1 keeps answers independent of "
        "batching, whose numerics can flip a near-tie token",
    )
    p.add_argument("--stall-timeout", type=float, default=60.0, help="seconds without data")
    p.add_argument("--out", type=Path, default=None, help="write canary.json into this folder")
    _add_api_key(p)

    p.set_defaults(func=_run_canary)


def _run_canary(ns: argparse.Namespace) -> int:
    import json as _json

    from harness import canary
    from harness.files import write_atomic

    for name in ("baseline", "candidate"):
        _check_url(getattr(ns, name), f"--{name}")
    if not 0 <= ns.min_agreement <= 1:
        raise UsageError(f"--min-agreement must be between 0 and 1, not {ns.min_agreement:g}")
    if ns.agree_after_tokens < 0:
        raise UsageError(f"--agree-after-tokens must be at least 0, not {ns.agree_after_tokens}")
    _positive_seconds(ns, "stall_timeout")
    if ns.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    _check_api_key(ns)
    if ns.out:  # said before the prompts are sent, not after
        _out_folder(ns.out, "--out")
    headers = {"Authorization": f"Bearer {os.environ[ns.api_key]}"} if ns.api_key else None
    try:
        prompts = canary.load_prompts(ns.prompts)
    except canary.CanaryInputError as exc:
        raise UsageError(str(exc)) from None
    answers = [
        canary.ask(
            url,
            prompts,
            ns.model,
            headers=headers,
            stall_timeout_s=ns.stall_timeout,
            concurrency=ns.concurrency,
        )
        for url in (ns.baseline, ns.candidate)
    ]
    result = canary.compare(
        prompts,
        *answers,
        mode=ns.mode,
        min_agreement=ns.min_agreement,
        agree_after=ns.agree_after_tokens,
    )
    print(canary.format_table(result))
    if ns.out:
        write_atomic(ns.out / "canary.json", _json.dumps(result.to_dict(), indent=2) + "\n")
        print(f"result: {ns.out / 'canary.json'}")
    if result.status == "inconclusive":
        raise UsageError(f"{ns.baseline}: {result.reasons[0]}")
    return 0 if result.status == "pass" else 1


def _report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write report.html for a run folder, index.html for a session, a comparison "
        "of two sessions, or the history of many",
    )
    p.add_argument("run_folder", type=Path, nargs="?", help="a run folder or a session folder")
    p.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("BASELINE", "CANDIDATE"),
        help="two session folders: per scenario, both verdicts and figures side by side",
    )
    p.add_argument(
        "--history",
        type=Path,
        metavar="REPORTS_DIR",
        help="the folder of dated sessions (--reports-dir): verdict per scenario per night",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="the page to write (--compare, --history)"
    )
    p.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="with --compare: exit 1 when a scenario regressed",
    )

    def run(ns: argparse.Namespace) -> int:
        from harness.report.compare import ReportInputError, write_compare, write_history
        from harness.report.html import write_index, write_report

        chosen = [x for x in (ns.run_folder, ns.compare, ns.history) if x is not None]
        if len(chosen) != 1:
            raise UsageError("give one of: a run or session folder, --compare A B, --history DIR")
        if ns.out is not None:
            _out_folder(ns.out.parent, "--out", page=ns.out)
        try:
            if ns.compare:
                path, result = write_compare(*ns.compare, out=ns.out)
                c = result["counts"]
                print(
                    f"{path}: {len(result['common'])} scenario runs in both; {c['regressed']} "
                    f"regressed, {c['improved']} improved, {c['same']} the same; only in the "
                    f"baseline {len(result['only_baseline'])}, only in the candidate "
                    f"{len(result['only_candidate'])}"
                )
                return 1 if ns.fail_on_regression and c["regressed"] else 0
            if ns.history:
                path, table = write_history(ns.history, out=ns.out)
                failing = [n for n, t in table.items() if t["first_failing"] is not None]
                print(f"{path}: {len(table)} scenario runs, {len(failing)} not passing now")
                return 0
        except ReportInputError as exc:
            raise UsageError(str(exc)) from None
        folder = ns.run_folder
        if not folder.is_dir():
            raise UsageError(
                f"{folder} is not a folder; give a run folder (reports/<session>/<run>)"
            )
        if (folder / "records.jsonl").exists() or (folder / "summary.json").exists():
            try:
                path = write_report(folder)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        else:
            path = write_index(folder)
            if path is None:
                raise UsageError(f"{folder} holds no records.jsonl, summary.json or scenario runs")
        print(path)
        return 0

    p.set_defaults(func=run)


def _lint(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lint", help="check inference Deployments (YAML) against deployment rules")
    p.add_argument("paths", nargs="*", help="files or folders of YAML; - reads stdin")
    p.add_argument(
        "--format",
        choices=("text", "json", "github"),
        default="text",
        help="text (default), json, or github (workflow annotations)",
    )
    p.add_argument(
        "--fail-on",
        choices=("info", "warning", "error"),
        default="error",
        help="the least severe finding that makes the exit status 1 (default error)",
    )
    p.add_argument("--rules", action="store_true", help="list the rules and exit")
    p.add_argument(
        "--select",
        action="append",
        default=[],
        metavar="RC0xx",
        help="run only these rules (an id or a prefix; comma-separated or repeated)",
    )
    p.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="RC0xx",
        help="skip these rules (an id or a prefix; comma-separated or repeated)",
    )
    p.add_argument(
        "--engine-image",
        action="append",
        default=[],
        metavar="REGEX",
        help="also treat containers whose image matches as inference engines",
    )
    p.add_argument(
        "--engine-command",
        action="append",
        default=[],
        metavar="REGEX",
        help="also treat containers whose command or args match as inference engines",
    )
    p.add_argument(
        "--min-startup-s",
        type=float,
        default=600.0,
        help="weight-loading time the startupProbe must allow (default 600)",
    )
    p.add_argument(
        "--gpu-quota",
        type=int,
        default=None,
        help="nvidia.com/gpu the namespace may use, to check rollout surge",
    )
    p.add_argument(
        "--longest-silence-s",
        type=float,
        default=120.0,
        help="longest time an answer may send nothing (queue wait, prefill); the gateway's "
        "read timeout must exceed it (default 120)",
    )
    p.add_argument(
        "--longest-answer-s",
        type=float,
        default=None,
        help="longest answer the service must finish; the grace period must cover it",
    )

    p.set_defaults(func=_run_lint)


def _run_lint(ns: argparse.Namespace) -> int:
    import json as _json

    from harness import lint

    if ns.rules:
        print(lint.format_rules())
        return 0
    if not ns.paths:
        raise UsageError("lint: give YAML files or folders to check (- reads stdin)")

    def ids(given: list[str]) -> list[str]:
        return [i for g in given for i in g.split(",")]

    try:
        rules = lint.select_rules(ids(ns.select), ids(ns.ignore))
    except lint.LintInputError as exc:
        raise UsageError(str(exc)) from None
    for name in ("min_startup_s", "longest_silence_s", "longest_answer_s"):
        value = getattr(ns, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise UsageError(
                f"--{name.replace('_', '-')} must be a finite number of seconds, "
                f"not negative ({value:g})"
            )
    opts = lint.LintOptions(
        min_startup_s=ns.min_startup_s,
        gpu_quota=ns.gpu_quota,
        longest_silence_s=ns.longest_silence_s,
        longest_answer_s=ns.longest_answer_s,
    )
    opts.engine_images += ns.engine_image
    opts.engine_commands += ns.engine_command
    try:
        findings = lint.lint(lint.load_manifests(ns.paths), opts, rules)
    except lint.LintInputError as exc:
        raise UsageError(str(exc)) from None
    if ns.format == "json":
        print(_json.dumps([f.to_dict() for f in findings], indent=2))
    elif ns.format == "github":
        if findings:
            print(lint.format_github(findings))
    else:
        print(lint.format_text(findings))
    return lint.exit_code(findings, ns.fail_on)


def _plan(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="predict rollout time and capacity, or scale-up lag")
    p.add_argument("--replicas", type=int, default=6, help="the Deployment's replicas (6)")
    p.add_argument("--ready-s", type=float, default=60.0, help="new pod start to ready")
    p.add_argument("--drain-s", type=float, default=30.0, help="old pod drain to gone")
    p.add_argument(
        "--max-surge",
        default=None,
        help="pods or a percentage, as the Deployment takes it (25%% rounds up); with "
        "neither this nor --max-unavailable: four common strategies side by side",
    )
    p.add_argument(
        "--max-unavailable",
        default=None,
        help="pods or a percentage, as the Deployment takes it (25%% rounds down)",
    )
    p.add_argument(
        "--gpu-bound",
        action="store_true",
        help="a terminating pod keeps its GPU (a full GPU pool): docs/facts.md's model",
    )
    p.add_argument(
        "--step-s", type=float, default=5.0, help="the planner's time step in seconds (5)"
    )
    p.add_argument(
        "--load-per-replica",
        type=float,
        default=None,
        help="scale-up: metric per replica after a load step (e.g. in-flight requests)",
    )
    p.add_argument("--target-per-replica", type=float, default=None, help="scale-up: HPA target")
    p.add_argument("--sync-period-s", type=float, default=15.0, help="scale-up: HPA sync period")

    def run(ns: argparse.Namespace) -> int:
        from harness.plan import plan_rollout, plan_scale_up

        try:
            if ns.load_per_replica is not None or ns.target_per_replica is not None:
                if ns.load_per_replica is None or ns.target_per_replica is None:
                    raise UsageError("scale-up needs --load-per-replica and --target-per-replica")
                s = plan_scale_up(
                    ns.replicas,
                    ns.load_per_replica,
                    ns.target_per_replica,
                    ns.ready_s,
                    ns.sync_period_s,
                )
                print(
                    f"desired replicas {s.desired} (from {ns.replicas}); "
                    f"ready after about {s.lag_s:g} s"
                )
                return 0
            if ns.max_surge is not None or ns.max_unavailable is not None:
                from harness.rollout_math import resolve

                # whole numbers or percentages, rounded as the Deployment controller does
                strategies = [resolve(ns.max_surge or 0, ns.max_unavailable or 0, ns.replicas)]
            else:
                strategies = [(1, 0), (2, 1), (1, 1), (ns.replicas, 0)]
            plans = [
                plan_rollout(
                    ns.replicas,
                    ns.ready_s,
                    ns.drain_s,
                    surge,
                    unavailable,
                    gpu_bound=ns.gpu_bound,
                    step_s=ns.step_s,
                )
                for surge, unavailable in strategies
            ]
            print(
                f"replicas {ns.replicas}, ready {ns.ready_s:g} s, drain {ns.drain_s:g} s, "
                f"{'terminating pods hold GPUs' if ns.gpu_bound else 'Kubernetes rule'}"
            )
            print(
                f"{'maxSurge':>9} {'maxUnavail':>11} {'rollout':>9} {'fewest avail':>13} "
                f"{'extra GPUs':>11}"
            )
            for r in plans:
                print(
                    f"{r.max_surge:>9} {r.max_unavailable:>11} {r.duration_s:>8g}s "
                    f"{r.min_available:>13} {r.extra_gpus:>11}"
                )
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return 0

    p.set_defaults(func=run)


def _kube_local(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "kube-local",
        help="real Kubernetes on this machine (root): a control plane and nodes of "
        "containerd and the kubelet, running the simulator image",
    )
    p.add_argument("--run-dir", type=Path, default=None, help="default reports/kube-local-<time>")
    p.add_argument("--nodes", type=int, default=2, help="real nodes to start (2; 1 to 8)")
    p.add_argument(
        "--gpus-per-node", type=int, default=8, help="nvidia.com/gpu each node advertises (8)"
    )
    p.add_argument(
        "--apply",
        type=Path,
        action="append",
        default=[],
        help="manifests to apply once the API is up (e.g. deploy/sim/sim.yaml)",
    )
    p.add_argument("--namespace", default="default", help="where --apply puts its objects")
    p.add_argument(
        "--with-scalers",
        action="store_true",
        help="also run Prometheus (scraping every engine pod) and KEDA's operator and "
        "metrics API server (scripts/build-keda), for ScaledObjects and the HPA",
    )
    p.add_argument(
        "--service",
        default=None,
        help="serve this Service through an nginx ingress fed by its EndpointSlices",
    )
    p.add_argument(
        "--gateway-api",
        action="store_true",
        help="also run a Gateway API implementation (Traefik, scripts/build-traefik) serving "
        "--namespace's Gateway inference-gateway: the HTTPRoutes attached to it, for "
        "weighted_canary (kube.route)",
    )
    p.add_argument(
        "--vllm",
        action="store_true",
        help="also run real vLLM (scripts/build-vllm's CPU build) as the Deployment vllm, "
        "2 replicas, served through an ingress",
    )
    p.add_argument(
        "--vllm-shutdown-timeout",
        type=float,
        default=0,
        help="the vllm pods' --shutdown-timeout (default 0, vLLM's own: abort at SIGTERM)",
    )

    p.set_defaults(func=_run_kube_local)


MAX_KUBE_LOCAL_NODES = 8  # a bridge and a pod subnet each; more only slow the machine


def _run_kube_local(ns: argparse.Namespace) -> int:
    import json as _json

    from harness.cluster.kubelocal import (
        ControlPlaneError,
        ImageError,
        KubeLocal,
        NodeError,
        ScalersError,
    )
    from harness.cluster.kubelocal.gateway import GatewayError
    from harness.cluster.kubelocal.image import PAUSE
    from harness.engines.vllm import EngineUnavailable

    if not 1 <= ns.nodes <= MAX_KUBE_LOCAL_NODES:
        raise UsageError(
            f"--nodes must be between 1 and {MAX_KUBE_LOCAL_NODES}, not {ns.nodes}: pods "
            "need a node to run on"
        )
    if ns.gpus_per_node < 0:
        raise UsageError(f"--gpus-per-node must not be negative, not {ns.gpus_per_node}")
    run_dir = ns.run_dir or Path("reports") / time.strftime("kube-local-%Y%m%d-%H%M%S")
    kl = KubeLocal(run_dir, ns.nodes, ns.gpus_per_node, with_scalers=ns.with_scalers)
    try:
        kl.start()
        for path in ns.apply:
            kl.apply(path, ns.namespace)
        print(f"kubeconfig: {kl.kubeconfig.resolve()}", flush=True)
        print(f"  export KUBECONFIG={kl.kubeconfig.resolve()}", flush=True)
        # pod_kill's SIGKILL through the nodes' containerd (kube.kill_command)
        kill = _json.dumps(kl.kill_command())
        print(f"pod_kill: --set 'kube.kill_command={kill}'", flush=True)
        # node_loss: a node's power, off and on again
        off, on = (_json.dumps(kl.power_command(how)) for how in ("off", "on"))
        print(
            f"node_loss: --set 'kube.node_loss_command={off}' "
            f"--set 'kube.node_return_command={on}'",
            flush=True,
        )
        # preemption's preemptor runs the nodes' own pause image (nothing is pulled)
        print(
            f"preemption: --set kube.allow_preemption=true --set kube.preemptor_image={PAUSE}",
            flush=True,
        )
        if kl.scalers is not None:
            print(
                f"prometheus: {kl.scalers.prometheus_url} (KEDA's triggers' serverAddress)",
                flush=True,
            )
            print("keda: operator and metrics API server (external.metrics.k8s.io)", flush=True)
        if ns.service:
            print(f"gateway: {kl.ingress(ns.service, ns.namespace).url}", flush=True)
        if ns.gateway_api:
            gw = kl.gateway(ns.namespace)
            print(
                f"gateway API: Traefik serves Gateway {ns.namespace}/inference-gateway at "
                f"{gw.url} (HTTPRoutes name it in parentRefs); weighted_canary: --set "
                f"kube.gateway_url={gw.url} --set 'kube.gateway_log_files=[{gw.access_log}]' "
                "--set kube.route=ROUTE --set kube.stable_service=S --set "
                "kube.candidate_service=C",
                flush=True,
            )
        if ns.vllm:
            _kube_local_vllm(kl, ns.namespace, ns.vllm_shutdown_timeout)
        print("Ctrl-C stops the control plane and every pod", flush=True)
        while True:
            time.sleep(1)
    except (
        ControlPlaneError,
        ImageError,
        NodeError,
        ScalersError,
        EngineUnavailable,
        GatewayError,
    ) as exc:
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt as exc:
        print("stopping: control plane and pods", flush=True)
        return exit_code(exc, ctrl_c=0)
    finally:
        kl.stop()


def _kube_local_vllm(kl, namespace: str, shutdown_timeout_s: float) -> None:
    """Apply real vLLM's Deployment and say how to run the scenarios against it."""
    from harness.cluster.kubelocal.vllm import vllm_objects

    kl.apply_objects(vllm_objects(shutdown_timeout_s=shutdown_timeout_s), namespace)
    url = kl.ingress("vllm", namespace).url
    print(f"vllm: gateway {url} (its pods start in a minute or two)", flush=True)
    print(
        f"  pytest scenarios -k 'drain and pod' --target kube --kubeconfig={kl.kubeconfig}"
        f" --set engine.kind=vllm --set load.model=m --set slo.calibrate=always"
        f" --set kube.namespace={namespace}"
        f" --set kube.deployment=vllm --set kube.gateway_url={url}",
        flush=True,
    )


def _kube_restore(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("kube-restore", help="put back what an interrupted kube run changed")
    _config_args(p)
    p.add_argument(
        "--kubeconfig", default=None, help="the cluster's kubeconfig (default: $KUBECONFIG)"
    )

    def run(ns: argparse.Namespace) -> int:
        from harness.cluster.kube import restore_pending
        from harness.cluster.target import TargetError
        from harness.config.schema import load_config

        sets = ns.set + ([f"kube.kubeconfig={ns.kubeconfig}"] if ns.kubeconfig else [])
        cfg = load_config(ns.config, sets)
        try:
            done = restore_pending(cfg)
        except TargetError as exc:
            raise UsageError(str(exc)) from None
        if not done:
            print(f"nothing pending on {cfg.kube.namespace}/{cfg.kube.deployment}")
        return 0

    p.set_defaults(func=run)


def _serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a reports folder over HTTP, read-only (history first), for a review",
    )
    p.add_argument("folder", type=Path, nargs="?", default=Path("reports"))
    p.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (0.0.0.0 in a pod)")
    p.add_argument("--port", type=int, default=8080, help="default 8080")

    def run(ns: argparse.Namespace) -> int:
        from harness.serve import make_server

        server = make_server(ns.folder, ns.host, ns.port)
        host, port = server.server_address[:2]
        print(f"rollcheck serve: {ns.folder} on http://{host}:{port}/ (read-only)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt as exc:
            return exit_code(exc, ctrl_c=0)
        finally:
            server.server_close()
        return 0

    p.set_defaults(func=run)


COMMANDS = [
    _sim,
    _probe,
    _load,
    _up,
    _report,
    _canary,
    _lint,
    _plan,
    _kube_local,
    _kube_restore,
    _serve,
]


def version() -> str:
    from importlib import metadata

    try:
        return metadata.version("rollcheck")
    except metadata.PackageNotFoundError:  # run from a checkout that was not installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rollcheck", description=__doc__)
    parser.add_argument("--version", action="version", version=f"rollcheck {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for register in COMMANDS:
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from harness.signals import handle_sigterm

    parser = build_parser()
    ns = parser.parse_args(argv)
    handle_sigterm()
    try:
        code = ns.func(ns)
        sys.stdout.flush()  # a full disk or a closed pipe behind stdout: said here
        return code
    except (RollcheckError, ConfigError) as exc:  # every user error: one line, exit 2
        text = " ".join(str(exc).splitlines())  # a name from the input may hold a line break
        print(f"rollcheck {ns.command}: {text}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file or stream that cannot be written: one line, exit 2
        print(f"rollcheck {ns.command}: {_os_error(exc)}", file=sys.stderr)
        _quiet_stdout()
        return 2
    except KeyboardInterrupt as exc:
        return exit_code(exc)


def _os_error(exc: OSError) -> str:
    where = exc.filename if exc.filename else "standard output"
    return f"cannot write {where}: {exc.strerror or exc}; give a writable path (or free space)"


def _quiet_stdout() -> None:
    """After stdout failed, the interpreter's own flush at exit would fail again and
    print a traceback: stdout goes to /dev/null from here on."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
