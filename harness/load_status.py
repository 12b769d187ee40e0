"""The load's live account (load/status.json): what its Locust master writes
(loadgen/locustfile.py) and LoadRun and the report read, as one dataclass with its one
writer and one reader.

The master rewrites the file about twice a second from the workers' latest reports; a
reader gets None while there is no file yet, or a file it cannot read.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.files import write_atomic
from harness.streams import Outcome

FILE = "status.json"  # in the run folder's load/


@dataclass
class LoadStatus:
    state: str = "running"  # "done" once the master finished the run
    sent: int = 0
    records: int = 0  # written to records.jsonl
    in_flight: int = 0
    # every stream sent before it has its record written: the oldest stream in flight's
    # start (None: no worker has reported)
    settled_at: float | None = None
    outcomes: dict[str, int] = field(default_factory=dict)  # as the workers judged them
    # streams in flight whose gateway named their pod: request_id, upstream, ends_at
    streams: list[dict] = field(default_factory=list)
    workers: dict[str, dict] = field(default_factory=dict)  # each worker's latest report
    lost_workers: list[str] = field(default_factory=list)
    cpu_warning: bool = False  # Locust's own "CPU usage above 90%"
    time: float = 0.0
    step_at: float | None = None  # when the step shape's load step happened
    models_seq: int = 0  # the model mix every worker has taken (LoadRun.set_models)

    @property
    def outcome_total(self) -> int:
        """The outcomes the workers counted as they judged each stream, summed: counted
        apart from the records written, so a record lost or written twice between a
        worker and records.jsonl shows."""
        return sum(
            n
            for k, n in self.outcomes.items()
            if k in Outcome._value2member_map_ and isinstance(n, int)
        )

    def loop_lags_p99_s(self) -> list[float]:
        """Each worker's event-loop lateness at p99 over its last half minute."""
        lags = [(w.get("loop_lag") or {}).get("p99_s") for w in self.workers.values()]
        return [x for x in lags if x is not None]

    def write(self, load_dir: Path) -> None:
        write_atomic(Path(load_dir) / FILE, json.dumps(dataclasses.asdict(self)))

    @classmethod
    def read(cls, load_dir: Path) -> LoadStatus | None:
        try:
            data = json.loads((Path(load_dir) / FILE).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
