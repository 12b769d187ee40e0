"""Whether two samples of requests differ beyond their noise: the tests rollcheck makes
when it compares two sessions (harness.report.compare) and a canary's traffic with the
baseline's at each weight (weighted_canary). Pure: numbers in, a word and the test's own
account out.
"""

from __future__ import annotations

import statistics

# a latency change is claimed only when the two runs' samples differ beyond their noise:
# a two-sided Mann-Whitney U test at ALPHA, each sample at least MIN_SAMPLE requests, and
# a median that moved by at least LATENCY_TOLERANCE (and LATENCY_FLOOR_S). A goodput
# change likewise: a two-sided Fisher exact test on the two runs' good/not-good counts at
# ALPHA, and a share that moved by at least GOODPUT_TOLERANCE (one request over the TTFT
# SLO in 67, a stall of a busy machine, moved a rerun's share by 1.5 points and was
# called a regression)
ALPHA = 0.01
MIN_SAMPLE = 20
GOODPUT_TOLERANCE = 0.01  # one percentage point
LATENCY_TOLERANCE = 0.10
LATENCY_FLOOR_S = 0.001
# and only when the change is at least this many times each run's own client delay (p99
# of its load generator's event-loop lateness, harness.client_delay): a median that moved
# by less may be the client's, not the engine's (a rerun on a busy machine moved the
# longest ITL's median from 21 to 25 ms, p = 1e-11, with nothing changed but the machine)
CLIENT_DELAY_FACTOR = 2.0


def latency_change(
    base: list[float],
    cand: list[float],
    client_delays: tuple[float | None, ...] = (),
    min_sample: int = MIN_SAMPLE,
) -> tuple[str, str]:
    """('worse' | 'better' | '', what the test said) for two runs' per-request samples;
    client_delays: each run's own client delay p99 (None: not measured); min_sample: the
    fewest requests each sample needs for a test to be made."""
    if len(base) < min_sample or len(cand) < min_sample:
        return "", f"cannot tell: {len(base)} and {len(cand)} requests (fewer than {min_sample})"
    from scipy.stats import mannwhitneyu

    p = float(mannwhitneyu(base, cand, alternative="two-sided").pvalue)
    mb, mc = statistics.median(base), statistics.median(cand)
    said = f"Mann-Whitney U p = {p:.2g}, n = {len(base)} and {len(cand)}"
    if p >= ALPHA:
        return "", said + f": within the noise at {ALPHA:g}"
    if abs(mc - mb) < max(LATENCY_TOLERANCE * mb, LATENCY_FLOOR_S):
        return "", said + f": a median change under {LATENCY_TOLERANCE:.0%}"
    known = [d for d in client_delays if d is not None]
    if known and abs(mc - mb) < CLIENT_DELAY_FACTOR * max(known):
        delays = " and ".join(f"{d * 1000:.1f} ms" for d in known)
        return "", (
            said + f": a median change of {abs(mc - mb) * 1000:.1f} ms, under "
            f"{CLIENT_DELAY_FACTOR:g} times the client's own delay (p99 {delays})"
        )
    return ("worse" if mc > mb else "better"), said


def goodput_test(base: tuple[int, int], cand: tuple[int, int]) -> tuple[str, str]:
    """('worse' | 'better' | '', what the test said) for two samples' (good, requests)."""
    (gb, rb), (gc, rc) = base, cand
    if not rb or not rc:
        return "", f"cannot tell: {rb} and {rc} requests"
    b, c = gb / rb, gc / rc
    if abs(c - b) < GOODPUT_TOLERANCE:
        return "", f"a change under {GOODPUT_TOLERANCE * 100:g} percentage point"
    from scipy.stats import fisher_exact

    p = float(fisher_exact([[gb, rb - gb], [gc, rc - gc]], alternative="two-sided").pvalue)
    said = f"Fisher exact p = {p:.2g}, {gb} of {rb} and {gc} of {rc} good"
    if p >= ALPHA:
        return "", said + f": within the noise at {ALPHA:g}"
    return ("worse" if c < b else "better"), said
