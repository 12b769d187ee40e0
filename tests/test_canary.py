"""Canary answer comparison: literal answer pairs, and the gate command against real
simulator processes (a good candidate, a degraded one, one that does not answer)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from harness.canary import (
    Answer,
    Prompt,
    bad_chars,
    compare,
    first_divergence,
    load_prompts,
    repetition,
    token_at,
)

ROOT = Path(__file__).resolve().parents[1]
WORDS = "the engine keeps each stream alive while pods roll over to a new version".split()
PROMPTS = [Prompt(f"p{i}", f"question {i}", ("stream",) if i == 0 else ()) for i in range(6)]


def good_answer(i: int, n: int = 30) -> list[str]:
    rng = random.Random(i)
    return ["stream"] + [" " + rng.choice(WORDS) for _ in range(n)]


def answers(make) -> list[Answer]:
    return [Answer(p.id, "complete", make(i), "stop") for i, p in enumerate(PROMPTS)]


BASE = answers(good_answer)


@pytest.mark.unit
def test_identical_answers_pass_in_both_modes():
    for mode in ("same", "new"):
        r = compare(PROMPTS, BASE, answers(good_answer), mode)
        assert r.status == "pass" and r.agreement == 1.0 and r.reasons == []


@pytest.mark.unit
def test_one_token_different_is_a_divergence_at_that_token():
    def one_off(i):
        a = good_answer(i)
        if i == 2:
            a[7] = " lorem"
        return a

    r = compare(PROMPTS, BASE, answers(one_off), "same", min_agreement=1.0)
    assert r.status == "fail" and "first divergence at token 7" in r.reasons[0]
    (worst,) = r.worst()
    assert worst.prompt_id == "p2" and worst.differed.startswith("token 7 (char ")
    # at a tolerated rate (5 of 6) the same answers pass, and say where they differed
    assert compare(PROMPTS, BASE, answers(one_off), "same", min_agreement=0.8).status == "pass"
    # new weights: one word in thirty is not a different distribution
    assert compare(PROMPTS, BASE, answers(one_off), "new").status == "pass"


@pytest.mark.unit
def test_a_late_flip_agrees_after_n_tokens_and_other_weights_still_fail():
    """An engine that is not batch-invariant flips a near-tie token late (real vLLM on
    CPU: tokens 9 to 38); other weights differ from the first token."""

    def flipped_at(token):
        def make(i):
            a = good_answer(i)
            if i % 2:
                a[token] = " lorem"
            return a

        return make

    late = answers(flipped_at(12))  # 3 of 6 flipped at token 12
    assert compare(PROMPTS, BASE, late, "same", min_agreement=0.9).status == "fail"
    r = compare(PROMPTS, BASE, late, "same", min_agreement=0.9, agree_after=8)
    assert r.status == "pass" and r.agreement == 1.0, r.reasons
    assert r.observed == "6 of 6 answers identical (or for their first 8 tokens)"
    assert r.worst()[0].differed.startswith("identical for 12 tokens, then ")
    # a flip before the N-th token still counts against the candidate
    early = compare(PROMPTS, BASE, answers(flipped_at(3)), "same", 0.9, agree_after=8)
    assert early.status == "fail" and early.agreement == 0.5
    # other weights: every answer differs from its first token
    other = answers(lambda i: [" lorem"] + good_answer(i)[1:])
    r = compare(PROMPTS, BASE, other, "same", min_agreement=0.6, agree_after=8)
    assert r.status == "fail" and r.agreement == 0.0


@pytest.mark.unit
def test_empty_answers_fail_new_weights():
    r = compare(PROMPTS, BASE, answers(lambda i: []), "new")
    assert r.status == "fail"
    assert any(x.startswith("empty answers 100%") for x in r.reasons), r.reasons
    assert any("missing in 1 answers (p0)" in x for x in r.reasons)  # the lost "stream"


@pytest.mark.unit
def test_repeated_text_fails_new_weights():
    r = compare(PROMPTS, BASE, answers(lambda i: ["stream"] + [" the engine"] * 40), "new")
    assert r.status == "fail" and any(x.startswith("repetition") for x in r.reasons), r.reasons
    assert all("repetition +" in p.differed for p in r.worst())


@pytest.mark.unit
def test_shuffled_text_diverges_but_keeps_the_distribution():
    def shuffled(i):
        a = good_answer(i)
        random.Random(99).shuffle(a)
        return a

    assert compare(PROMPTS, BASE, answers(shuffled), "same").status == "fail"
    assert compare(PROMPTS, BASE, answers(shuffled), "new").status == "pass"


@pytest.mark.unit
def test_garbage_characters_and_shorter_answers_fail_new_weights():
    r = compare(PROMPTS, BASE, answers(lambda i: ["stream"] + ["\ufffd\x07"] * 30), "new")
    assert any("replacement characters" in x for x in r.reasons), r.reasons
    r = compare(PROMPTS, BASE, answers(lambda i: good_answer(i, 5)), "new")
    assert any(x.startswith("median length 0.19x") for x in r.reasons), r.reasons


@pytest.mark.unit
def test_a_candidate_that_does_not_answer_fails_and_a_silent_baseline_is_inconclusive():
    down = [Answer(p.id, "connect_error", error="refused") for p in PROMPTS]
    r = compare(PROMPTS, BASE, down, "new")
    assert r.status == "fail" and "did not answer 6 of 6 prompts (connect_error)" in r.reasons[0]
    assert r.worst()[0].differed == "candidate connect_error: refused"
    assert compare(PROMPTS, down, BASE, "same").status == "inconclusive"


@pytest.mark.unit
def test_measures():
    assert first_divergence("ab", "ab") is None
    assert first_divergence("ab", "ac") == 1
    assert first_divergence("a", "ab") == 1
    # the same text in other events agrees; the position is the baseline's event
    assert compare(PROMPTS[:1], [Answer("p0", "complete", ["ab", "c"])],
                   [Answer("p0", "complete", ["a", "bc"])]).agreement == 1.0  # fmt: skip
    assert token_at(["the", " cat", " sat"], 5) == 1 and token_at(["a"], 3) == 1
    assert repetition("a b c d e f") == 0 and repetition("a b c a b c a b c") == pytest.approx(
        4 / 7
    )
    assert bad_chars("ok\ufffd") == pytest.approx(1 / 3) and bad_chars("ok\n") == 0


@pytest.mark.process
@pytest.mark.parametrize(
    "line, message",
    [
        ("not json", "bad.jsonl:2: not a JSON line"),
        ('{"expect": ["x"]}', 'bad.jsonl:2: needs "prompt": a non-empty string'),
        ('{"prompt": "hi", "max_tokens": -3}', '"max_tokens" must be a positive integer, not -3'),
        ('{"prompt": "hi", "expect": "x"}', '"expect" must be a list of non-empty strings'),
        ('{"prompt": "hi", "temperature": 1}', "unknown key 'temperature'"),
    ],
)
def test_a_bad_prompt_file_stops_with_one_line(tmp_path, line, message):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"prompt": "fine"}\n' + line + "\n")
    r = run_canary(
        "--baseline", "http://127.0.0.1:9", "--candidate", "http://127.0.0.1:9", "--prompts", f
    )
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


@pytest.mark.unit
def test_prompt_file_with_ids_comments_and_defaults(tmp_path):
    f = tmp_path / "golden.jsonl"
    f.write_text(
        '# golden prompts\n{"id": "a", "prompt": "hi", "expect": ["x"]}\n\n{"prompt": "yo"}\n'
    )
    got = load_prompts(f)
    assert [(p.id, p.expect, p.max_tokens) for p in got] == [("a", ("x",), 64), ("line4", (), 64)]


def run_canary(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "canary", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.process
def test_the_gate_command_against_real_simulators(sim_factory, tmp_path):
    base = sim_factory(itl_s=0.002)
    upgrade = sim_factory(itl_s=0.002, model_version="v2", weights="v1")  # same weights
    bad = sim_factory(itl_s=0.002, model_version="v2", weights="v1", degraded=True)
    retrained = sim_factory(itl_s=0.002, model_version="v2")  # new weights, healthy

    r = run_canary("--baseline", base.url, "--candidate", upgrade.url, "--out", tmp_path)
    assert r.returncode == 0 and "PASS: 8 of 8 answers identical" in r.stdout, r.stdout
    r = run_canary("--baseline", base.url, "--candidate", bad.url, "--out", tmp_path)
    assert r.returncode == 1 and "FAIL: 0 of 8 answers identical" in r.stdout
    saved = json.loads((tmp_path / "canary.json").read_text())
    assert saved["status"] == "fail" and saved["worst"][0]["differed"].startswith("token 0 ")
    assert saved["worst"][0]["baseline"] and saved["worst"][0]["candidate"]  # side by side
    r = run_canary("--baseline", base.url, "--candidate", bad.url, "--mode", "new")
    assert r.returncode == 1 and "repetition" in r.stdout
    r = run_canary("--baseline", base.url, "--candidate", retrained.url, "--mode", "new")
    assert r.returncode == 0, r.stdout
    # a candidate that does not answer is a failure with its outcome, never a crash
    bad.signal(9)
    bad.exited_within(10)
    r = run_canary("--baseline", base.url, "--candidate", bad.url)
    assert r.returncode == 1 and "connect_error" in r.stdout and "Traceback" not in r.stderr


@pytest.mark.unit
def test_the_argo_rollouts_example_runs_a_valid_command_on_valid_prompts(tmp_path):
    """deploy/canary: the analysis Job's arguments parse, and its golden prompts load."""
    import yaml

    from harness.cli import build_parser

    template, prompts = yaml.safe_load_all(
        (ROOT / "deploy/canary/analysis-template.yaml").read_text()
    )
    job = template["spec"]["metrics"][0]["provider"]["job"]["spec"]["template"]["spec"]
    args = job["containers"][0]["args"]
    assert args[:2] == ["rollcheck", "canary"]
    golden = tmp_path / "golden.jsonl"
    golden.write_text(prompts["data"]["golden.jsonl"])
    filled = [
        a.replace("{{args.stable-url}}", "http://stable:8000")
        .replace("{{args.canary-url}}", "http://canary:8000")
        .replace("{{args.mode}}", "same")
        .replace("/prompts/golden.jsonl", str(golden))
        for a in args[1:]
    ]
    ns = build_parser().parse_args(filled)
    assert (ns.mode, ns.min_agreement) == ("same", 0.9)
    assert [p.id for p in load_prompts(ns.prompts)] == ["capital", "arithmetic", "code", "long"]


@pytest.mark.unit
def test_the_candidate_pods_serving_while_compared_are_counted_from_the_timeline():
    """A canary gate holds at one candidate pod; a rollout that went on before the
    comparison ended had several, and the check says it was no gate."""
    from harness.checks import canary_answers
    from harness.events import Event
    from harness.timeline import pods_ready_of

    def ev(t, kind, pod, version):
        return Event(t, kind, pod, None, version, {})

    events = [
        ev(1, "ready", "base-1", "v1"),
        ev(10, "ready", "cand-1", "v2"),
        ev(12, "ready", "cand-2", "v2"),  # the rollout went on while asking (11..20)
        ev(30, "ready", "cand-3", "v2"),  # after the comparison: not counted
        ev(5, "ready", "old-cand", "v2"),
        ev(8, "pod_removed", "old-cand", "v2"),  # gone before the asking began
    ]
    assert pods_ready_of(events, "v2", since=11, until=20) == ["cand-1", "cand-2"]
    result = {
        "status": "pass", "mode": "same", "prompts_compared": 8, "observed": "8 of 8 agree",
        "expected": "agreement >= 0.9", "reasons": [], "candidate_pod": "cand-1",
        "baseline_pod": "base-1", "candidate_pods_serving": ["cand-1", "cand-2"],
    }  # fmt: skip
    r = canary_answers(result)(None)
    assert r.status == "inconclusive"
    assert r.reason.startswith("2 candidate pods served while the answers were compared")
    assert canary_answers(result | {"candidate_pods_serving": ["cand-1"]})(None).status == "pass"
    unknown = canary_answers(result | {"candidate_pods_serving": []})(None)
    assert unknown.status == "inconclusive" and "unknown" in unknown.reason
