"""The pytest side of watching a run: where phase lines and the status line go, and the
session's outlook (scenarios selected, estimated time, deadline) before it starts.

Phase lines are records of the `rollcheck` logger (harness.progress), at INFO unless the
user set that logger's level. With pytest's live logging on (-o log_cli=true,
--log-cli-level) pytest prints them; otherwise TerminalLines prints them while a scenario
runs, as pytest's live logging would (capture suspended for the line). Either way
pytest's captured log keeps them (shown with a failure, and in caplog). With
-p no:logging there is no captured log, and TerminalLines still prints them.

The status of a wait is one line rewritten in place on a terminal (TerminalLines.status),
only when TerminalLines is the one printing; elsewhere harness.progress logs it every
ui.progress_every_s.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter

import pytest

from harness.progress import Progress, clock, log

handler_key = pytest.StashKey["TerminalLines"]()


class TerminalLines(logging.Handler):
    """The rollcheck logger's lines on pytest's terminal, while a scenario runs."""

    def __init__(self, config: pytest.Config):
        super().__init__(logging.INFO)
        self.config = config
        self.active = False
        self.shown = False  # a status line is on the screen
        self.setFormatter(logging.Formatter("rollcheck %(message)s"))

    def _reporter(self):
        return self.config.pluginmanager.get_plugin("terminalreporter")

    def _io(self):
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        return capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()

    @property
    def isatty(self) -> bool:
        tr = self._reporter()
        return bool(tr is not None and tr.isatty())

    def emit(self, record: logging.LogRecord) -> None:
        tr = self._reporter()
        if not self.active or tr is None:
            return
        try:
            line = self.format(record)
            with self._io():
                if self.shown:
                    tr._tw.write("\r\x1b[K")
                    self.shown = False
                elif tr._tw.width_of_current_line:  # after pytest's "scenarios/x.py ." column
                    tr._tw.line()
                tr.write_line(line)
        except Exception:
            self.handleError(record)

    def status(self, text: str) -> None:
        """Draw (or, with "", clear) the status line in place."""
        tr = self._reporter()
        if tr is None:
            return
        with self.lock, self._io():
            tw = tr._tw
            if text:
                if not self.shown and tw.width_of_current_line:
                    tw.line()
                tw.write("\r\x1b[K" + text[: max(20, tw.fullwidth - 1)], flush=True)
                self.shown = True
            elif self.shown:
                tw.write("\r\x1b[K", flush=True)
                self.shown = False


def _live_logging(config: pytest.Config) -> bool:
    """pytest prints log records itself (its live logging is on)."""
    try:
        return config.getoption("log_cli_level", None) is not None or bool(config.getini("log_cli"))
    except ValueError:  # -p no:logging: no such ini setting
        return False


def configure(config: pytest.Config) -> None:
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    if _live_logging(config):
        return
    handler = TerminalLines(config)
    log.addHandler(handler)
    config.stash[handler_key] = handler
    config.add_cleanup(lambda: log.removeHandler(handler))


@contextlib.contextmanager
def scenario_progress(config: pytest.Config, name: str, cfg):
    """A started Progress for one scenario; its lines on the terminal meanwhile."""
    handler = config.stash.get(handler_key, None)
    shown = handler is not None and cfg.ui.phase_lines
    status = handler.status if shown and handler.isatty else None
    progress = Progress(name, cfg.ui.progress_every_s, status)
    if handler is not None:
        handler.active = shown
    progress.start()
    try:
        yield progress
    finally:
        progress.stop()
        if handler is not None:
            handler.active = False


def selected(items, kinds) -> list[tuple[str, str, dict]]:
    """(name, kind, parameters) of each scenario run selected; a rollout's strategy as
    its module's STRATEGIES give it."""
    out = []
    for item in items:
        kind = next((m.name for m in item.iter_markers() if m.name in kinds), "scenario")
        callspec = getattr(item, "callspec", None)
        params = dict(callspec.params) if callspec is not None else {}
        strategies = getattr(getattr(item, "module", None), "STRATEGIES", None)
        strategy = params.get("strategy")
        if isinstance(strategies, dict) and isinstance(strategy, str) and strategy in strategies:
            params["max_surge"], params["max_unavailable"] = strategies[strategy]
        out.append((item.name, kind, params))
    return out


def deadline_for(config: pytest.Config, cfg) -> tuple[float | None, str]:
    """--deadline-s, else (on --target kube, in a Job's pod) the Job's deadline left."""
    given = config.getoption("deadline_s", None)
    if given is not None:
        return given, "--deadline-s"
    if config.getoption("target", "local") != "kube" or cfg.kube.dry_run:
        return None, ""
    from harness.cluster.kube.deadline import nightly_deadline

    return nightly_deadline(cfg)


def worst_cases(config: pytest.Config, cfg, items, kinds) -> dict[str, float]:
    """Run folder name -> the worst case of each selected scenario run (harness.estimate)."""
    from harness.estimate import estimate_scenario
    from harness.nightly import run_folder_name

    target = config.getoption("target", "local")
    return {
        run_folder_name(name): estimate_scenario(name, kind, cfg, target, params).worst_s
        for name, kind, params in selected(items, kinds)
    }


def session_outlook(config: pytest.Config, cfg, items, kinds) -> list[str]:
    from harness.estimate import outlook

    runs = selected(items, kinds)
    counts = Counter(kind for _, kind, _ in runs)
    names = ", ".join(f"{k} x{n}" if n > 1 else k for k, n in sorted(counts.items()))
    est = outlook(runs, cfg, config.getoption("target", "local"))
    lines = [
        f"rollcheck: {len(runs)} scenario runs selected ({names})",
        f"rollcheck: estimated time {clock(est.typical_s)}, worst case {clock(est.worst_s)} "
        "(every wait to its bound)",
    ]
    deadline, source = deadline_for(config, cfg)
    if deadline is None:
        return lines
    if est.worst_s <= deadline:
        lines.append(f"rollcheck: deadline {clock(deadline)} ({source}): the worst case fits")
        return lines
    likely = "even the estimate exceeds it: " if est.typical_s > deadline else ""
    lines.append(
        f"rollcheck: WARNING: the worst case, {clock(est.worst_s)}, exceeds the deadline of "
        f"{clock(deadline)} ({source}): {likely}" + "; ".join(est.over(deadline))
    )
    return lines
