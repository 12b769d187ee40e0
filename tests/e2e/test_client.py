"""The load generator measured as it measures: a saturated client says so, and the
verdict does not blame the engine for it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.scenario_runs import run_scenarios

# 48 streams of 500 tokens/s is 24,000 events/s, about what one Locust worker reads on a
# whole core, four times what it reads on the quarter it gets here (docs/facts.md, "The
# load generator's own delay", "The lean reader"); the ITL SLO makes its limit
# 12.5 ms. The engines have the slots for every user, so no request queues for one.
FLOOD = (
    "load.users=48",
    "engine.max_num_seqs=16",
    "engine.itl_s=0.002",
    "slo.itl_s=0.05",
    "load.workers=0",  # one worker, on purpose (auto would ask for more)
)


@pytest.mark.alone  # it loads a core on purpose: beside no other test
def test_a_saturated_client_makes_latency_inconclusive_and_still_judges_streams(tmp_path):
    """One worker, pinned to one core (load.cpus) with three busy loops beside it, reads far
    more events than it can: client_kept_up names the delay and the workers the load
    needed, the ITL budget is INCONCLUSIVE instead of FAILing, and every stream is still
    judged (all complete, no_broken_streams PASS)."""
    core = max(os.sched_getaffinity(0))
    # three busy loops, each in a session of its own as the load's Locust is (with the
    # kernel's autogroup each session has a fair share): the worker gets a quarter of
    # its core, about 5,800 events/s of the lean reader's (docs/facts.md), a quarter of
    # what the flood sends. One loop beside it (half a core) was enough for httpx; the
    # lean reader then kept up over the run (p99 9.7 ms, its limit 12.5 ms)
    burners = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import os\nos.sched_setaffinity(0, [{core}])\nwhile True: pass",
            ],
            start_new_session=True,
        )
        for _ in range(3)
    ]
    try:
        proc, (summary,) = run_scenarios(tmp_path, "drain and pod", *FLOOD, f"load.cpus=[{core}]")
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    checks = {c["name"]: c for c in summary["checks"]}
    client = checks["client_kept_up"]
    assert client["status"] == "inconclusive", client
    assert "the load generator was saturated" in client["reason"]
    assert "itl_slo_budget could not be judged" in client["reason"]
    assert checks["itl_slo_budget"]["status"] == "inconclusive", checks["itl_slo_budget"]
    assert checks["no_broken_streams"]["status"] == "pass"
    assert summary["outcomes"]["complete"] == summary["requests"] == summary["sent"]
    assert summary["verdict"] == "inconclusive" and proc.returncode == 1
    delay = summary["load_generator"]["delay"]
    # over the run (a drain of a second or two has too few figures of its own to say)
    assert delay["all"]["p99_s"] > summary["load_generator"]["delay_limit_s"]
    assert "INCONCLUSIVE client_kept_up: the load generator was saturated" in proc.stdout
    report = next(tmp_path.glob("*/*/report.html")).read_text()
    assert "client delay p99" in report
