"""Gathering a run: the three views of each request joined into one (the load's records,
the gateway's lines, the target's events), and the engines' own request logs where the
gateway's lines name no pod. The records given are left as they were: the joined ones
are copies, each with its pod, version and gateway line."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.engine_logs import served_by
from harness.events import Event
from harness.gateway_logs import (
    ErrorLine,
    GatewayLine,
    Unparsed,
    attach_errors,
    keep_only_run_lines,
    read_access_log,
    read_error_log,
    record_ids,
)
from harness.streams import StreamRecord
from harness.timeline import correlate


@dataclass
class Joined:
    records: list[StreamRecord]  # copies of the load's, each traced to its pod and version
    events: list[Event]
    access: list[GatewayLine]  # this run's lines only
    errors: list[ErrorLine]  # those joined to one of them
    unparsed: Unparsed = field(default_factory=Unparsed)
    access_log: str | None = None  # where the access log was, if there was one
    engine_logs: int = 0  # the engines' request logs read


def join(records: Sequence[StreamRecord], target, run_dir: Path) -> Joined:
    """The target's gateway logs and events, joined to the records by request id."""
    access_path, error_path = target.gateway_logs()
    events = target.events()
    access, unparsed = read_access_log(access_path)
    # the load's requests only, not the harness's own polls through the gateway (nor
    # another tenant's lines in a shared ingress log)
    ids = {i for r in records for i in record_ids(r)}
    access = [a for a in access if a.request_id in ids]
    errors = attach_errors(access, read_error_log(error_path))
    logged = access_path is not None and Path(access_path).exists()
    if logged and Path(run_dir) in Path(access_path).parents:
        # logs followed into the run folder (a shared ingress): this run's lines only
        keep_only_run_lines(access_path, error_path, ids, errors)
    engine_logs = target.engine_logs()
    joined = [dataclasses.replace(r) for r in records]
    correlate(joined, access, events, served_by(engine_logs) if engine_logs else None)
    return Joined(
        records=joined,
        events=events,
        access=access,
        errors=errors,
        unparsed=unparsed,
        access_log=str(access_path) if logged else None,
        engine_logs=len(engine_logs),
    )


def wait_logged(
    target, records: Sequence[StreamRecord], wait_for: Callable, timeout_s: float
) -> None:
    """nginx logs a request when its connection closes: wait (bounded) until the last
    answered request of the run is in the access log."""
    access_path, _ = target.gateway_logs()
    answered = [r for r in records if r.status is not None]
    if not access_path or not answered:
        return
    ids = record_ids(max(answered, key=lambda r: r.ended_at))
    path = Path(access_path)

    def logged() -> bool:
        try:
            text = path.read_text(errors="replace")
            return any(i in text for i in ids)
        except OSError:
            return False

    wait_for(logged, timeout_s, "the gateway to log the run")
