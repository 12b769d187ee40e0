"""How often a weighted_canary step judges a fair split wrong, by when the step ends.

Run: .venv/bin/python -m benchmarks.bench_weighted_steps [--trials 20000] [--rate 4.5]

A simulation of one step on a gateway that splits exactly at its weight: streams arrive
at `rate` a second (Poisson), each the candidate's with the weight's probability; the
step is looked at once a second from weighted_canary.step_s on, as the scenario looks,
and ends by one of two rules, at step_max_s at the latest:
- "candidate": once the candidate has served min_samples streams (the rule before
  2026-12-06);
- "weight": once the step holds min_samples / weight streams and min_samples of them
  are the candidate's (harness.weights.Step.has_enough).
Prints, per weight and rule, the share of steps whose split is judged off its weight
(harness.weights.split_tolerance) and the step's mean length. The judgement counts
every stream sent in the step, as the scenario does now (the streams sent before the
oldest still in flight).
"""

from __future__ import annotations

import argparse
import random

from harness.weights import Step, split_tolerance


def one_step(rng, percent, rate, min_samples, rule, step_s=3.0, max_s=40.0):
    arrivals, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t > max_s:
            break
        arrivals.append((t, rng.random() < percent / 100))
    at = step_s
    while True:
        sent = [c for when, c in arrivals if when < at]
        step = Step(percent, 0.0, at, requests=len(sent), candidate=sum(sent))
        done = (
            step.candidate >= min_samples if rule == "candidate" else step.has_enough(min_samples)
        )
        if done or at >= max_s:
            break
        at += 1.0
    p = percent / 100
    wrong = bool(step.requests) and abs(step.candidate / step.requests - p) > split_tolerance(
        p, step.requests
    )
    return wrong, at


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20000)
    ap.add_argument("--rate", type=float, default=4.5, help="streams a second")
    ap.add_argument("--min-samples", type=int, default=10)
    args = ap.parse_args()
    rng = random.Random(1)
    print(f"{args.trials} steps each, {args.rate:g} streams/s, min_samples {args.min_samples}")
    print(f"{'weight':>6}  {'rule':<9}  {'judged off':>10}  {'mean length':>11}")
    for percent in (10.0, 50.0):
        for rule in ("candidate", "weight"):
            runs = [
                one_step(rng, percent, args.rate, args.min_samples, rule)
                for _ in range(args.trials)
            ]
            wrong = sum(w for w, _ in runs) / len(runs)
            length = sum(a for _, a in runs) / len(runs)
            print(f"{percent:>5g}%  {rule:<9}  {wrong:>9.2%}  {length:>9.1f} s")


if __name__ == "__main__":
    main()
