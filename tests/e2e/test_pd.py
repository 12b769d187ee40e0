"""pd_rollout as a user runs it: a plain prefill/decode rollout (the handshake leaves the
weights out, as vLLM's does) FAILs with the mixed answers and the pods that built them;
the revision-aware control PASSes in the well-configured night (test_detection.py)."""

from __future__ import annotations

from pathlib import Path

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


def test_a_killed_prefill_pods_waiting_decodes_pass_its_failure_on_without_the_fallback(
    tmp_path,
):
    """llm-d's sidecar alone: the prefills in flight on the killed pod end 502, and the
    decode pods pass that on as their users' errors, named in the decode pods' view."""
    proc, (s,) = run_scenarios(tmp_path, "pd_prefill and kill", "engine.pd_prefill_fallback=false")
    assert s["verdict"] == "fail", failed_checks(s)
    assert {"no_broken_streams", "pd_prefill_waiting"} <= failed_checks(s)
    assert s["outcomes"]["http_error"] > 0
    view = s["pd_prefill"]["decode_view"]
    assert view["passed_on"] > 0 and view["fallback"] == 0
    assert any(w["status"] == 502 for w in s["pd_prefill"]["waiting"])
    page = (Path(s["report"]).parent / "report.html").read_text()
    victim = s["pd_prefill"]["victim"]
    assert f"P/D prefill: prefill pod {victim} killed" in page  # the reviewer's view of it
    assert "<td class=num>502</td>" in page


def test_a_decode_hanging_on_a_drained_prefill_is_caught(tmp_path):
    """A prefill engine that stops answering at SIGTERM (and no preStop to cover its
    endpoint's removal), a sidecar with no prefill timeout: the decode pods wait on the
    drained prefill until its SIGKILL, and their users' streams hang meanwhile."""
    hanging = "pd.prefill_engine={ttft_s: 0.3, shutdown_timeout_s: 0, shutdown_mode: hang}"
    proc, (s,) = run_scenarios(
        tmp_path,
        "pd_prefill and drain",
        hanging,
        "engine.pd_prefill_timeout_s=0",
        "pod.prestop_s=0",
    )
    assert s["verdict"] == "fail", failed_checks(s)
    assert {"no_hung_streams", "pd_prefill_waiting"} <= failed_checks(s)
    check = next(c for c in s["checks"] if c["name"] == "pd_prefill_waiting")
    assert "past the stall timeout" in check["observed"], check
    # held until the pod's SIGKILL, its termination grace after the SIGTERM
    assert max(w["ended_s"] for w in s["pd_prefill"]["waiting"]) > 10
