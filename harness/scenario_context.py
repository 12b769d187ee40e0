"""What the parts a Scenario is built of share (its disruption, recovery, versions and
preconditions): the target, the config, the phase lines, the load once it runs, and the
scenario's own ways to wait for a condition and to stop early."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.cluster.target import Target
    from harness.config.schema import RunConfig
    from harness.load import LoadRun
    from harness.progress import Progress


@dataclasses.dataclass(frozen=True)
class ScenarioContext:
    target: Target
    cfg: RunConfig
    progress: Progress
    # the running load (None before the steady state)
    load: Callable[[], LoadRun | None]
    # Scenario.wait_for(cond, timeout_s, what): cond's first truthy value, or None
    wait_for: Callable[..., Any]
    # Scenario.inconclusive(reason, stage=...): INCONCLUSIVE, or FAIL if a stream broke
    stop: Callable[..., Any]
    # when the steady state was reached (the load's start before it is)
    steady_at: Callable[[], float]
