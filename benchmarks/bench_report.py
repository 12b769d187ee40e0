"""Report rendering: time and peak memory for 100,000 records (goal: < 10 s, < 1 GB).

Run: .venv/bin/python -m benchmarks.bench_report [--records 100000]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from harness.report.html import write_report
from tests.test_report import make_run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        folder = make_run(Path(d) / "run", args.records, args.records // 200, "fail")
        t0 = time.perf_counter()
        page = write_report(folder)
        took = time.perf_counter() - t0
        size_mb = page.stat().st_size / 1e6
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{args.records} records: rendered in {took:.2f} s, {size_mb:.1f} MB page, "
        f"peak RSS {peak_mb:.0f} MB (including building the test data)"
    )


if __name__ == "__main__":
    main()
