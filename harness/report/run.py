"""The run folder: summary.json (machine-readable) and report.html (for people)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.files import write_atomic
from harness.load_status import LoadStatus
from harness.report.summary import build_summary


def write_run(scenario, data, results, load_status: LoadStatus | None) -> dict:
    """Write summary.json and report.html into the scenario's run folder."""
    run_dir = Path(scenario.run_dir)
    summary = build_summary(
        scenario=scenario.kind,
        name=scenario.name,
        target=scenario.target.name,
        data=data,
        results=results,
        load_status=load_status,
        config=scenario.cfg,
        target_obj=scenario.target,
    )
    summary |= getattr(scenario, "extras", {})
    summary["report"] = str(run_dir / "report.html")
    write_atomic(run_dir / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    from harness.report.html import write_report

    write_report(run_dir)
    return summary
