"""pd_rollout as a user runs it: a plain prefill/decode rollout (the handshake leaves the
weights out, as vLLM's does) FAILs with the mixed answers and the pods that built them;
the revision-aware control PASSes in the well-configured night (test_detection.py)."""

from __future__ import annotations

from tests.e2e.test_detection import failed_checks
from tests.scenario_runs import run_scenarios

PLAIN = ("engine.pd_handshake_weights=false", "engine.pd_kv_load_failure=fail")


def test_a_plain_pd_rollout_builds_answers_from_both_versions(tmp_path):
    """Whichever role rolls first, its new pods meet the other role's old ones: the
    answers mixed are each a decode of one version continuing the other version's KV."""
    proc, summaries = run_scenarios(tmp_path, "pd_rollout and not together", *PLAIN)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "verdict FAIL" in proc.stdout and "#55776" in proc.stdout
    assert len(summaries) == 2
    for s in summaries:
        assert s["verdict"] == "fail" and "pd_answers_unmixed" in failed_checks(s)
        pd = s["pd_rollout"]
        # the load's own streams never broke: nothing but the answers shows it
        assert set(k for k, v in s["outcomes"].items() if v) <= {"complete", "cancelled"}
        summary = pd["summary"]
        assert summary["mixed"] > 0 and summary["mixing_s"] > 0
        # golden answers of both versions' own around the mixing
        assert summary["counts"].get("v1") and summary["counts"].get("v2")
        first = pd["order"].split("_")[0]  # the role that rolled first runs v2
        for pair in summary["pairs"]:
            decode, prefill = pair["decode_pod"], pair["prefill_pod"]
            assert "-prefill-" in prefill and "-prefill-" not in decode
            new_side = prefill if first == "prefill" else decode
            old_side = decode if first == "prefill" else prefill
            assert "-v2-" in new_side and "-v1-" in old_side, pair
        mixed = [a for a in pd["answers"] if a["version"] == "mixed"]
        assert all(a["kv"] == "read" for a in mixed)  # the KV passed the handshake
