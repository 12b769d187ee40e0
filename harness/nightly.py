"""The nightly's plan: which scenarios run tonight, in what order, within the deadline.

A nightly Job has a deadline (its activeDeadlineSeconds, or --deadline-s) that the
session's worst case may pass: the GPU profile's eleven runs take about four hours by
the estimate and a day at their worst. With --fit-deadline the session plans before it
acts:

- the order: the scenarios the reports folder has not seen run for longest first (a
  scenario never run before comes first of all), ties broken by a rotation that puts
  each first in turn, one step a night (the night's number: days since the epoch), so
  that over the nights every scenario gets its turn at the head of the queue;
- before each scenario: start it only if the time used so far, its worst case and the
  restore that may follow still fit in the deadline; once one does not, the night
  stops starting scenarios (the rest are left for another night, each with why).

Nothing here touches a cluster or a clock: the estimates, the history and the time
used come in as values (tests/test_nightly.py drives seven nights with literal ones).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.files import write_atomic
from harness.progress import clock

SESSION_NAME = re.compile(r"^\d{8}-\d{6}-[a-z]+$")  # <stamp>-<target>, as sessions are named
NIGHT_S = 86400.0
# Kept free after the last scenario for the restore: the Deployment's template and count,
# an HPA and a KEDA pause put back are API writes (seconds each; the rollout they start
# is not waited for), so a minute covers them with a slow API server. A Job killed at its
# deadline anyway restores in its terminationGracePeriodSeconds (the SIGTERM path).
RESTORE_S = 60.0


def run_folder_name(test_name: str) -> str:
    """The run folder a scenario run writes (the pytest item's name, made a file name)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name).strip("_")


def night_number(now_s: float) -> int:
    """Days since the epoch (UTC): one step of the rotation a night."""
    return int(now_s // NIGHT_S)


def last_runs(reports_dir: Path) -> dict[str, str]:
    """Run folder name -> the newest session (its folder name, which sorts by time) in
    which that scenario ran to a verdict (a skipped run did not run)."""
    seen: dict[str, str] = {}
    if not reports_dir.is_dir():
        return seen
    sessions = sorted(p for p in reports_dir.iterdir() if p.is_dir() and SESSION_NAME.match(p.name))
    for session in sessions:
        for summary in session.glob("*/summary.json"):
            try:
                verdict = json.loads(summary.read_text()).get("verdict")
            except (OSError, ValueError, AttributeError):
                continue
            if verdict in ("pass", "fail", "inconclusive"):
                seen[summary.parent.name] = session.name
    return seen


def night_order(names: list[str], last: dict[str, str], night: int) -> list[str]:
    """Tonight's order: never run first, then the longest since its last run; ties in
    the rotation's order (the collection order, started `night` places further on)."""
    n = len(names)
    if n == 0:
        return []
    shift = night % n
    rotated = {name: (i - shift) % n for i, name in enumerate(names)}
    return sorted(names, key=lambda name: (name in last, last.get(name, ""), rotated[name]))


def fits(used_s: float, worst_s: float, deadline_s: float, restore_s: float) -> bool:
    """Whether a scenario whose worst case is worst_s may start with used_s gone: it and
    the restore after it must end before the deadline."""
    return used_s + worst_s + restore_s <= deadline_s


@dataclass
class Night:
    """A night's plan and what became of it (night.json in the session folder)."""

    deadline_s: float
    source: str
    restore_s: float
    night: int
    order: list[str]
    worst_s: dict[str, float]
    started: list[str] = field(default_factory=list)
    left: list[dict] = field(default_factory=list)
    stopped: bool = False

    def planned(self) -> tuple[list[str], list[str]]:
        """By the worst cases alone: what tonight will run, and what it will leave."""
        used, run = 0.0, []
        for name in self.order:
            if not fits(used, self.worst_s[name], self.deadline_s, self.restore_s):
                return run, self.order[len(run) :]
            run.append(name)
            used += self.worst_s[name]
        return run, []

    def may_start(self, name: str, used_s: float) -> str | None:
        """None when `name` may start now; else why it is left for another night (and
        every scenario after it is left too)."""
        worst = self.worst_s[name]
        if self.stopped:
            why = "an earlier scenario was left for another night, so the night stopped there"
        elif fits(used_s, worst, self.deadline_s, self.restore_s):
            self.started.append(name)
            return None
        else:
            left = max(0.0, self.deadline_s - used_s)
            why = (
                f"its worst case {clock(worst)} and a restore of {clock(self.restore_s)} "
                f"would pass the deadline: {clock(left)} of {clock(self.deadline_s)} left "
                f"({self.source})"
            )
            self.stopped = True
        self.left.append({"name": name, "worst_s": round(worst, 1), "why": why})
        return why

    def lines(self) -> list[str]:
        run, left = self.planned()
        out = [
            f"rollcheck: night plan: deadline {clock(self.deadline_s)} ({self.source}), "
            f"{clock(self.restore_s)} kept for the restore; order by the longest since its "
            f"last run (rotation step {self.night % max(1, len(self.order))})",
            f"rollcheck: night plan: by the worst cases {len(run)} of {len(self.order)} "
            f"runs fit: {', '.join(run) or 'none'}",
        ]
        if left:
            out.append(f"rollcheck: night plan: left for another night: {', '.join(left)}")
        return out

    def as_dict(self) -> dict:
        return {
            "deadline_s": round(self.deadline_s, 1),
            "source": self.source,
            "restore_s": round(self.restore_s, 1),
            "night": self.night,
            "order": self.order,
            "worst_s": {k: round(v, 1) for k, v in self.worst_s.items()},
            "started": self.started,
            "left": self.left,
        }

    def write(self, session_dir: Path) -> None:
        write_atomic(session_dir / "night.json", json.dumps(self.as_dict(), indent=2))
