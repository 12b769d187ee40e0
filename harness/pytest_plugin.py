"""rollcheck's pytest plugin: options, markers, fixtures and the session index.

Options: --target local|kube, --config FILE, --set key=value (repeatable),
--reports-dir DIR, --kubeconfig FILE. Each scenario gets a run folder under
<reports-dir>/<session>/, and the session writes index.html over all of them.
State lives on the pytest config's stash, not in globals.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from harness.config import ConfigError
from harness.engines.kinds import kind_of

KINDS = {
    "rollout": "rolling update to a new engine version",
    "drain": "evict pods or drain a node (voluntary disruption)",
    "scale_to_zero": "scale an idle-looking replica to zero with a long answer in flight",
    "pod_kill": "kill a pod mid-stream (involuntary disruption)",
    "oom_kill": "one request's context crosses an engine's memory limit: OOMKilled mid-stream",
    "preemption": "a pod of a higher priority takes an engine pod's accelerators (kube only)",
    "node_loss": "an engine pod's node stops as a power loss would",
    "scale_up": "a load step while new replicas start",
    "scale_down": "remove one of several replicas while one decodes a long answer",
    "startup": "roll out a version that starts slower than the liveness window",
    "canary": "one replica of a new version, its answers compared with the baseline's",
    "adapter_rollout": "a LoRA adapter moved to its next version by weight under load",
    "weighted_canary": "a candidate given a share of the traffic at the gateway, step by step",
    "shadow": "the gateway copies the requests to a candidate and discards its answers",
    "pd_rollout": "new weights rolled across a prefill/decode deployment's two roles",
    "pd_prefill": "a prefill pod drained or killed, or the prefill role scaled to zero",
}
# the scenarios of a prefill/decode deployment: the local target runs one for them
PD_KINDS = ("pd_rollout", "pd_prefill")

config_key = pytest.StashKey[object]()
night_key = pytest.StashKey[object]()
started_key = pytest.StashKey[float]()
session_dir_key = pytest.StashKey[Path]()
calibration_key = pytest.StashKey[object]()
sizing_key = pytest.StashKey[object]()  # load.workers: auto, resolved (harness/load_sizing.py)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rollcheck", "rollcheck scenarios")
    group.addoption(
        "--target",
        choices=("local", "kube"),
        default="local",
        help="where the scenarios run (default: the embedded local target)",
    )
    group.addoption(
        "--config",
        type=Path,
        default=None,
        help="run config YAML (default: rollcheck.yaml at the repo root)",
    )
    group.addoption(
        "--set",
        action="append",
        default=[],
        dest="rollcheck_set",
        metavar="KEY=VALUE",
        help="override a config setting (dotted keys)",
    )
    group.addoption(
        "--reports-dir",
        type=Path,
        default=Path("reports"),
        help="where run folders go (default: reports/)",
    )
    group.addoption(
        "--keep-sessions",
        type=int,
        default=None,
        metavar="N",
        help="after the run, delete all but the newest N session folders in --reports-dir "
        "(the nightly's pruning); --junitxml may name {session}, this run's folder name",
    )
    group.addoption("--kubeconfig", default=None, help="kubeconfig for --target kube")
    group.addoption(
        "--deadline-s",
        type=float,
        default=None,
        metavar="SECONDS",
        help="the session must end within this (a CI job's limit): a worst case beyond it is "
        "said before the first scenario, naming what to drop or shorten (in the nightly pod, "
        "its Job's activeDeadlineSeconds is read when this is not given)",
    )
    group.addoption(
        "--fit-deadline",
        action="store_true",
        default=False,
        help="the nightly's plan: order the scenarios by the longest since their last run in "
        "--reports-dir (a rotation breaks ties), and start each only while its worst case and "
        "the restore still fit in the deadline (--deadline-s, or the Job's); the rest are left "
        "for another night, each SKIPPED with why, and the session's index lists them",
    )
    group.addoption(
        "--dry-run",
        action="store_true",
        default=False,
        help="--target kube: print every action instead of taking it",
    )


@pytest.hookimpl(tryfirst=True)  # before junitxml opens its file
def pytest_configure(config: pytest.Config) -> None:
    from harness.signals import handle_sigterm

    xmlpath = getattr(config.option, "xmlpath", None)
    if xmlpath and "{session}" in xmlpath:  # one JUnit file per night, beside its reports
        config.option.xmlpath = xmlpath.replace("{session}", _session_dir(config).name)
    _check_reports_dir(Path(config.getoption("reports_dir", None) or "reports"))
    keep = config.getoption("keep_sessions", None)
    if keep is not None and keep < 1:
        raise pytest.UsageError(f"--keep-sessions must be at least 1, not {keep}")

    # SIGTERM (a CronJob's deadline, a node drain) unwinds like Ctrl-C: the target fixture
    # puts back what the scenario changed, and pytest exits non-zero (interrupted)
    handle_sigterm()
    for kind, text in KINDS.items():
        config.addinivalue_line("markers", f"{kind}: {text}")
    args = list(config.invocation_params.args)
    if "--kubeconfig" in args:
        # pytest reads its paths before any plugin's options are known: in the space form
        # the kubeconfig became a test path, and its folder the rootdir (then the project's
        # own tests were collected instead of the scenarios)
        raise pytest.UsageError(
            "write --kubeconfig=PATH (with '='), or set KUBECONFIG=PATH: with a space pytest "
            "takes the kubeconfig for a test path"
        )
    if config.getoption("rollcheck_set") or config.getoption("config"):
        # a bad --set or config file is one line now, not an error in every scenario's
        # fixture set-up (with the fixture's code printed) after collection
        cfg = _run_config(config)
        if cfg.load.web_ui:  # a port in use: said now, not after the first target settles
            from harness.load import LoadError, check_web_ui_free

            try:
                check_web_ui_free(cfg.load.web_ui)
            except LoadError as exc:
                raise pytest.UsageError(str(exc)) from None
    deadline = config.getoption("deadline_s", None)
    if deadline is not None and deadline <= 0:
        raise pytest.UsageError(f"--deadline-s must be above 0, not {deadline:g}")
    from harness import live

    live.configure(config)


def _check_reports_dir(path: Path) -> None:
    """--reports-dir must be a folder rollcheck can write (checked before any scenario)."""
    if path.exists() and not path.is_dir():
        raise pytest.UsageError(f"--reports-dir {path} is a file, not a folder; give a folder")
    if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        raise pytest.UsageError(f"--reports-dir {path} is not writable; give a writable folder")


def _run_config(config: pytest.Config):
    if config_key not in config.stash:
        from harness.config.schema import load_config

        sets = list(config.getoption("rollcheck_set"))
        if config.getoption("kubeconfig"):
            sets.append(f"kube.kubeconfig={config.getoption('kubeconfig')}")
        if config.getoption("dry_run"):
            sets.append("kube.dry_run=true")
        try:
            cfg = load_config(config.getoption("config"), sets)
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from None
        if cfg.load.workers == "auto":  # (the config keeps "auto": each load is sized)
            config.stash[sizing_key] = _size_load(cfg, config.getoption("target"))
        config.stash[config_key] = cfg
    return config.stash[config_key]


def _size_load(cfg, target: str):
    """load.workers: auto, for this session's engine: the simulator's pace is its
    engine.itl_s on the local target; elsewhere it is not known here."""
    from harness.load import measure_budget
    from harness.load_sizing import size

    local = target == "local"
    tokens_per_s = kind_of(cfg.engine).tokens_per_s(cfg.engine) if local else None
    if tokens_per_s:
        pace = f"from the simulator's engine.itl_s ({cfg.engine.itl_s:g} s)"
        return size(cfg.load, tokens_per_s, pace, True, measure_budget)
    return size(cfg.load, None, "", local, measure_budget)


def _session_dir(config: pytest.Config) -> Path:
    if session_dir_key not in config.stash:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = Path(config.getoption("reports_dir")) / f"{stamp}-{config.getoption('target')}"
        path.mkdir(parents=True, exist_ok=True)
        config.stash[session_dir_key] = path
    return config.stash[session_dir_key]


@pytest.fixture(scope="session")
def rollcheck_config(pytestconfig):
    """The RunConfig: the config file with every --set applied."""
    return _run_config(pytestconfig)


@pytest.fixture
def run_dir(request) -> Path:
    """This scenario's run folder: records, events, gateway logs, summary, report."""
    from harness.nightly import run_folder_name

    path = _session_dir(request.config) / run_folder_name(request.node.name)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def progress(request, rollcheck_config):
    """The scenario's phase lines and its status while it waits (harness.progress), from
    the start of its target to its verdict."""
    from harness import live

    with live.scenario_progress(request.config, request.node.name, rollcheck_config) as prog:
        yield prog


def _kind(item) -> str:
    return next((m.name for m in item.iter_markers() if m.name in KINDS), "scenario")


@pytest.fixture
def target(request, rollcheck_config, run_dir, progress):
    """The target, started and settled; stopped (and restored) afterwards."""
    from harness.cluster.target import CannotRun

    kind = request.config.getoption("target")
    if kind == "local":
        from harness.cluster.local import LocalTarget

        tgt = LocalTarget(rollcheck_config, run_dir, pd=_kind(request.node) in PD_KINDS)
        if rollcheck_config.kube.dry_run:
            from harness.dryrun import DryRunTarget

            tgt = DryRunTarget(tgt)
    else:
        from harness.dryrun import kube_target

        tgt = kube_target(rollcheck_config, run_dir, _kind(request.node))
    try:
        progress.phase(f"starting the target: {kind}, {rollcheck_config.replicas} replicas")
        try:
            tgt.start()
        except CannotRun as exc:  # found before anything was touched (RBAC): SKIPPED
            from harness.preconditions import write_unjudged

            write_unjudged(run_dir, _kind(request.node), request.node.name, tgt.name, str(exc))
            progress.phase(f"SKIPPED: {exc}")
            pytest.skip(f"rollcheck: SKIPPED: {exc}")
        progress.target = tgt
        # bringing the target up is not under test: scenario.settle_s allows for slow
        # engine starts (at least three of the simulator's, which the config knows)
        startup = rollcheck_config.engine.startup_s if kind == "local" else 0
        tgt.hold_count(rollcheck_config.replicas)  # a scaler of the workload's own waits
        progress.desired = rollcheck_config.replicas
        progress.phase(f"settling: waiting for {rollcheck_config.replicas} ready replicas")
        tgt.wait_settled(
            rollcheck_config.replicas,
            timeout_s=max(rollcheck_config.scenario.settle_s, 3 * startup + 30),
            stall_s=rollcheck_config.scenario.startup_stall_s,
        )
        ready = len(tgt.ready_pods())
        progress.phase(f"settled: {ready} of {rollcheck_config.replicas} replicas ready")
        yield tgt
    finally:
        progress.follow()
        progress.closing = True
        tgt.close()
        if tgt.restored and (run_dir / "summary.json").exists():
            # the restore came after the report: draw it again with the restore in it
            from harness.report.html import write_report

            write_report(run_dir)


@pytest.fixture
def scenario(request, rollcheck_config, target, run_dir, progress):
    """The scenario helper: steady state, act, observe, judge."""
    from harness.dryrun import DryRunLoad
    from harness.load import LoadRun
    from harness.scenario import Scenario

    kind = _kind(request.node)
    cfg, calibration = _calibrated(request.config, rollcheck_config, target)
    # a dry run: the same scenario over a target that takes no action and a load that
    # sends nothing (harness/dryrun.py)
    load = DryRunLoad.factory(target) if cfg.kube.dry_run else LoadRun
    sc = Scenario(request.node.name, kind, cfg, target, run_dir, progress, load_factory=load)
    if sizing_key in request.config.stash:
        sc.load_workers = request.config.stash[sizing_key].workers
    if calibration is not None:
        sc.extras["calibration"] = calibration.as_dict()
    try:
        yield sc
    finally:
        sc.close()  # its threads joined and its load stopped, however the run ended


def _calibrated(config: pytest.Config, cfg, target):
    """With real engines on the local target, or slo.calibrate=always on any target (real
    vLLM pods on kube-local's CPUs), the config with the SLOs this machine is judged by,
    measured once a session on the first scenario's engine, and the calibration
    (harness/calibration.py); otherwise the config as it is, and None."""
    import dataclasses

    auto = kind_of(cfg.engine).real and config.getoption("target") == "local"
    wanted = {"always": True, "never": False}.get(cfg.slo.calibrate, auto)
    if not wanted or cfg.kube.dry_run:
        return cfg, None
    if calibration_key not in config.stash:
        config.stash[calibration_key] = _calibrate(config, cfg, target)
    cal = config.stash[calibration_key]
    return dataclasses.replace(cfg, slo=dataclasses.replace(cfg.slo, ttft_s=cal.ttft_s)), cal


def _calibrate(config: pytest.Config, cfg, target):
    from harness import calibration
    from harness.cluster.target import TargetError

    pod = target.ready_pods()[0]
    url, settings = target.pod_endpoint(pod.name)
    key = target.auth_headers()
    model = cfg.load.model
    longest = max(share.tokens for share in cfg.load.prompt_tokens)
    calibration.warm_up(
        url, model, max(1, cfg.scenario.warm_requests), settings, key, prompt_tokens=longest
    )
    unloaded, batch = calibration.measure(
        url, model, cfg.engine.max_num_seqs, longest, settings, key
    )
    figures = calibration.figures_from(unloaded, batch)
    if figures is None:
        outcomes = ", ".join(r.outcome for r in [*unloaded, *batch])
        raise TargetError(
            f"measuring the engine on {pod.name} before the first scenario: its answers were "
            f"{outcomes}; read its log in the run folder's pods/"
        )
    explicit = frozenset(s.split("=", 1)[0].strip() for s in config.getoption("rollcheck_set"))
    cal = calibration.calibrate(figures, cfg.slo.ttft_s, cfg.slo.itl_s, explicit)
    _say(config, [f"rollcheck: {line}" for line in cal.lines])
    _say(config, [f"rollcheck: WARNING: {line}" for line in cal.warnings], yellow=True)
    return cal


def _say(config: pytest.Config, lines: list[str], **markup) -> None:
    """Lines on the terminal now, during a test's set-up (not captured with its output)."""
    tr = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if tr is None or not lines:
        return
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        for line in lines:
            tr.write_line(line, **markup)


@pytest.fixture
def load(scenario):
    """A running load against the target (the scenario's steady state)."""
    scenario.steady_state()
    return scenario.load


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """The target found, before acting, that it cannot run this scenario (CannotRun): the
    scenario ends SKIPPED with the reason, its run folder saying why, as
    `scenario.preconditions.skip` does."""
    from harness.cluster.target import CannotRun

    try:
        return (yield)
    except CannotRun as exc:
        sc = getattr(item, "funcargs", {}).get("scenario")
        if sc is None:
            raise
        sc.preconditions.skip(str(exc))  # raises ScenarioSkipped


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    from harness.errors import RollcheckError
    from harness.preconditions import ScenarioSkipped
    from harness.scenario import DryRun, ScenarioFailed

    if call.excinfo is not None and call.excinfo.errisinstance(ScenarioFailed):
        report.longrepr = str(call.excinfo.value)  # the verdict is the message, not a traceback
    elif call.excinfo is not None and call.excinfo.errisinstance(RollcheckError):
        # a user's error (an engine not installed, a cluster refusing): one line
        report.longrepr = f"rollcheck: {call.excinfo.value}"
    elif call.excinfo is not None and call.excinfo.errisinstance(ScenarioSkipped):
        report.outcome = "skipped"  # JUnit <skipped message=...>, the terminal's SKIPPED
        reason = f"rollcheck: SKIPPED: {call.excinfo.value}"
        report.longrepr = (str(item.path), item.location[1], reason)
    elif call.excinfo is not None and call.excinfo.errisinstance(DryRun):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1], str(call.excinfo.value))


def _scenario_items(items) -> list:
    return [i for i in items if "scenario" in getattr(i, "fixturenames", ())]


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items) -> None:
    """--fit-deadline: tonight's order and the night's plan (harness/nightly.py)."""
    config.stash[started_key] = time.monotonic()
    if not config.getoption("fit_deadline", False) or config.option.collectonly:
        return
    scenarios = _scenario_items(items)
    if not scenarios:
        return
    from harness import live, nightly

    cfg = _run_config(config)
    deadline, source = live.deadline_for(config, cfg)
    if deadline is None:
        _say(config, [f"rollcheck: night plan: no deadline known ({source}): every run starts"])
        return
    worst = live.worst_cases(config, cfg, scenarios, KINDS)
    names = [nightly.run_folder_name(i.name) for i in scenarios]
    last = nightly.last_runs(Path(config.getoption("reports_dir")))
    number = nightly.night_number(time.time())
    order = nightly.night_order(names, last, number)
    night = nightly.Night(deadline, source, nightly.RESTORE_S, number, order, worst)
    config.stash[night_key] = night
    by_name = dict(zip(names, scenarios, strict=True))
    others = [i for i in items if i not in scenarios]
    items[:] = others + [by_name[n] for n in order]
    _say(config, night.lines())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    """--fit-deadline: a run whose worst case no longer fits is left for another night."""
    night = item.config.stash.get(night_key, None)
    if night is None or "scenario" not in getattr(item, "fixturenames", ()):
        return
    from harness.nightly import run_folder_name

    used = time.monotonic() - item.config.stash[started_key]
    why = night.may_start(run_folder_name(item.name), used)
    if why is not None:
        pytest.skip(f"rollcheck: left for another night: {why}")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before the first scenario: the scenarios selected and the session's estimated time,
    the worst case beside it, and a deadline the worst case would overrun."""
    items = _scenario_items(session.items)
    if not items or session.config.option.collectonly:
        return
    from harness import live

    config = session.config
    try:
        cfg = _run_config(config)
    except pytest.UsageError:
        return  # said when the first scenario asks for its config
    lines = live.session_outlook(config, cfg, items, KINDS)
    if sizing_key in config.stash:
        lines.insert(2, f"rollcheck: {config.stash[sizing_key].why}")
    if config.stash.get(night_key, None) is not None:  # the night plan has said what fits
        lines = [line for line in lines if "deadline" not in line]
    _say(config, [line for line in lines if "WARNING" not in line])
    _say(config, [line for line in lines if "WARNING" in line], yellow=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    config = session.config
    if exitstatus == pytest.ExitCode.INTERRUPTED and session_dir_key in config.stash:
        _interrupted_runs(config.stash[session_dir_key])
    if config.stash.get(night_key, None) is not None:
        _session_dir(config)  # a night that left every run still says so
    if session_dir_key not in config.stash:
        return
    from harness.errors import RollcheckError
    from harness.report.compare import write_history
    from harness.report.html import write_index

    session_dir = config.stash[session_dir_key]
    night = config.stash.get(night_key, None)
    if night is not None:
        night.write(session_dir)
    index = write_index(session_dir)
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if index is None or tr is None:
        return
    keep = config.getoption("keep_sessions")
    if keep:
        pruned = prune_sessions(session_dir.parent, keep, current=session_dir)
        if pruned and tr is not None:
            tr.write_line(f"rollcheck: pruned {len(pruned)} old sessions ({', '.join(pruned)})")
    # every session in the reports folder (the nightly keeps one per night): the history
    try:
        history, _ = write_history(session_dir.parent)
    except RollcheckError as exc:  # an old session the history cannot read: said, not fatal
        history = f"not written ({exc})"
    if tr._tw.width_of_current_line:  # after the progress column ("[100%]")
        tr._tw.line()
    for line in verdict_lines(session_dir):
        tr.write_line(line)
    tr.write_line(f"rollcheck: session report {index}")
    tr.write_line(f"rollcheck: history of {session_dir.parent} {history}")


def _interrupted_runs(session_dir: Path) -> None:
    """A session stopped by a signal (the Job's deadline, a node drain, Ctrl-C) leaves the
    run it was in without a verdict: that run says so, INCONCLUSIVE, so the index and the
    history show the night as it ended, its records and events beside it."""
    from harness.preconditions import write_unjudged

    for folder in sorted(p for p in session_dir.iterdir() if p.is_dir()):
        if (folder / "summary.json").exists() or not (folder / "events.jsonl").exists():
            continue
        reason = (
            "the session was interrupted (SIGTERM: the Job's deadline or a node drain, or "
            "Ctrl-C) before this run's verdict; what it recorded is in its folder"
        )
        write_unjudged(folder, "interrupted", folder.name, None, reason, verdict="inconclusive")


def pytest_unconfigure(config: pytest.Config) -> None:
    """The last of the session: no thread of rollcheck's may outlive it (an abort at
    interpreter exit would turn a passing night into a failed Job: harness/threads.py)."""
    from harness.threads import outliving

    left = outliving()
    if left:
        import sys

        print(
            f"rollcheck: WARNING: threads still running at exit: {', '.join(left)}", file=sys.stderr
        )


def prune_sessions(reports_dir: Path, keep: int, current: Path | None = None) -> list[str]:
    """Delete all but the newest `keep` session folders (named and shaped as sessions:
    nothing else in the folder is touched), never `current` (this session's, whatever
    its name sorts as: a clock set back on the node)."""
    import shutil

    from harness.nightly import SESSION_NAME

    current = current.resolve() if current is not None else None
    sessions = sorted(
        p
        for p in reports_dir.iterdir()
        if p.is_dir()
        and SESSION_NAME.match(p.name)
        and any(p.glob("*/summary.json"))
        and p.resolve() != current
    )
    room = max(0, keep - 1 if current is not None else keep)  # the current one counts
    old = sessions[: max(0, len(sessions) - room)]
    for p in old:
        shutil.rmtree(p)
    return [p.name for p in old]


def pytest_sessionstart(session: pytest.Session) -> None:
    """--keep-sessions: room on the reports volume before the night writes (the oldest
    nights beyond the count, so a volume full of old nights is not this night's end)."""
    keep = session.config.getoption("keep_sessions", None)
    reports = Path(session.config.getoption("reports_dir", None) or "reports")
    if keep and reports.is_dir():
        prune_sessions(reports, keep - 1)


def verdict_lines(session_dir: Path) -> list[str]:
    """One line per scenario run: verdict, goodput (the headline figure), attribution."""
    from harness.report.html import goodput_text

    lines = []
    from harness.report.html import ReportInputError, read_summary

    for path in sorted(session_dir.glob("*/summary.json")):
        try:
            s = read_summary(path)
        except ReportInputError as exc:
            lines.append(f"rollcheck: {exc}")
            continue
        att = (s.get("attribution") or {}).get("text", "")
        att = att if isinstance(att, str) else ""
        if s["verdict"] == "skipped":
            lines.append(f"rollcheck: {s.get('name')} SKIPPED: {s.get('reason')}")
            continue
        lines.append(
            f"rollcheck: {s.get('name')} {s['verdict'].upper()}, goodput {goodput_text(s)}"
            + (f", {att}" if att else "")
            + timing_text(s.get("timing"))
        )
    return lines


def timing_text(timing) -> str:
    """ ", 2m10s, 64% waiting (longest: the rollout, 48s)" from summary.json's timing."""
    from harness.progress import clock

    def number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if not isinstance(timing, dict) or not number(timing.get("wall_s")):
        return ""  # (a summary from before, or one rollcheck did not write)
    text = f"; {clock(timing['wall_s'])}"
    share = timing.get("waiting_share")
    if number(share):
        text += f", {share:.0%} waiting"
        longest = timing.get("longest_wait")
        if isinstance(longest, dict) and isinstance(longest.get("what"), str):
            took = longest.get("s")
            text += f" (longest: {longest['what'][:80]}, {clock(took if number(took) else 0)})"
    return text
