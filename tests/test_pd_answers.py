"""pd_rollout's judgement from literal data: golden answers held to each version's own,
a mixed one named with the pods that built it, and the decode pods' routes read from the
simulator's own log lines."""

from __future__ import annotations

import pytest

from harness import checks as C
from harness.pd import GoldenAnswer, classify, routes_in_log, summarize
from tests.test_verdict import data, status

OLD = {"capital": "Paris is the capital.", "list": "red, green, blue"}
NEW = {"capital": "The capital is Paris.", "list": "red, yellow, blue"}
T0 = 1000.0


def answer(prompt, text, sent, outcome="complete", decode="d-v1-1", prefill="p-v1-1"):
    return GoldenAnswer(prompt, T0 + sent, T0 + sent + 0.5, outcome, text, f"r{sent}",
                        decode_pod=decode, prefill_pod=prefill)  # fmt: skip


def result(answers, problem=None) -> dict:
    classify(answers, OLD, NEW, ("v1", "v2"))
    return {
        "versions": ["v1", "v2"],
        "baseline_problem": problem,
        "summary": summarize(answers, T0),
    }


@pytest.mark.unit
def test_an_answer_that_is_neither_versions_own_is_mixed_and_named_with_its_pods():
    answers = [
        answer("capital", OLD["capital"], 0.1),
        answer("list", "red, orange, blue", 1.0, decode="d-v1-1", prefill="p-v2-3"),
        answer("capital", "Paris, capital of", 2.0, decode="d-v1-2", prefill="p-v2-3"),
        answer("list", "red, orange, blue", 2.5, decode="d-v1-1", prefill="p-v2-3"),
        answer("list", NEW["list"], 4.0, decode="d-v2-4", prefill="p-v2-3"),
        answer("capital", "Paris is", 4.5, outcome="error_event"),
    ]
    r = result(answers)
    assert [a.version for a in answers] == ["v1", "mixed", "mixed", "mixed", "v2", None]
    s = r["summary"]
    assert s["counts"] == {"v1": 1, "mixed": 3, "v2": 1, "broken": 1}
    # from the first mixed answer sent to the last one's end
    assert (s["first_mixed_s"], s["last_mixed_s"], s["mixing_s"]) == (1.0, 3.0, 2.0)
    assert s["pairs"][0] == {"decode_pod": "d-v1-1", "prefill_pod": "p-v2-3", "answers": 2}
    said = C.pd_answers(r)(data([]))
    assert status(said) == "fail"
    assert said.observed.startswith("3 golden answers neither v1's nor v2's (built from both)")
    assert "decode d-v1-1 from prefill p-v2-3 (2)" in said.observed
    assert "1 broken" in said.observed
    assert "#55776" in said.hint and "revision" in said.hint


@pytest.mark.unit
def test_every_answer_one_versions_own_passes():
    answers = [answer("capital", OLD["capital"], 0.1), answer("list", NEW["list"], 3.0)]
    said = C.pd_answers(result(answers))(data([]))
    assert status(said) == "pass" and said.observed == "1 v1's, 1 v2's"


@pytest.mark.unit
def test_no_version_to_hold_the_answers_to_cannot_tell():
    answers = [answer("capital", "anything", 0.1)]
    broke = result(answers, problem="the golden prompts through the gateway broke before")
    assert status(C.pd_answers(broke)(data([]))) == "inconclusive"
    assert status(C.pd_answers(result([]))(data([]))) == "inconclusive"
    # every answer during it broke: nothing shows whether they would have mixed
    gone = [answer("capital", "", 0.1, outcome="hung")]
    assert status(C.pd_answers(result(gone))(data([]))) == "inconclusive"
    # a prompt whose golden answer one side lacks is not judged, never called mixed
    unknown = [answer("other", "text", 0.1)]
    assert result(unknown)["summary"]["counts"] == {"broken": 1}


@pytest.mark.unit
def test_the_decode_pods_routes_are_read_from_its_log(tmp_path):
    log = tmp_path / "d.log"
    log.write_text(
        "INFO 12-06 13:19:10 [rollcheck-sim] P/D chatcmpl-a1: KV from 127.100.1.2:4001 "
        "(weights v1)\n"
        "INFO 12-06 13:19:11 [rollcheck-sim] P/D chatcmpl-b2: handshake with "
        "127.100.1.3:4002: compatibility hash mismatch; its prefill computed here again\n"
        "INFO 12-06 13:19:12 [rollcheck-sim] P/D cmpl-c3: KV read from 127.100.1.3:4002: "
        "HTTP 404; the request fails (kv_load_failure_policy fail)\n"
        "INFO 12-06 13:19:12 [rollcheck-sim] P/D d4: prefill at http://x: HTTP 503\n"
        "a line of its own\n"
    )
    assert routes_in_log(log) == {
        "a1": ("127.100.1.2:4001", "read"),
        "b2": ("127.100.1.3:4002", "recomputed"),
        "c3": ("127.100.1.3:4002", "failed"),
    }
    assert routes_in_log(tmp_path / "none.log") == {}


def waiting_result(ended: list[tuple[int, float]], passed_on=0, fallback=0, act="kill") -> dict:
    return {
        "act": act,
        "victim": "p-v1-1",
        "waiting": [
            {"request_id": f"r{i}", "status": st, "upstream_status": str(st), "ended_s": t}
            for i, (st, t) in enumerate(ended)
        ],
        "decode_view": {"passed_on": passed_on, "fallback": fallback, "why": {"HTTP 502": 2}},
    }


@pytest.mark.unit
def test_the_decode_pods_waiting_on_a_disrupted_prefill_are_judged_by_how_they_ended():
    ok = C.pd_prefill_waiting(waiting_result([(200, 0.2), (502, 0.0)], fallback=1))(data([]))
    assert status(ok) == "pass"
    assert ok.observed.startswith("2 prefills on prefill pod p-v1-1 not ended at the act")
    assert "computed 1 themselves" in ok.observed
    # a prefill held past the stall timeout (5 s in data()): its users' streams hung
    hung = C.pd_prefill_waiting(waiting_result([(200, 0.2), (502, 12.0)]))(data([]))
    assert status(hung) == "fail" and "ended only 12.0 s after the act" in hung.observed
    assert "--shutdown-timeout" in hung.hint and "timeout on the prefill" in hung.hint
    # the decode passed the prefill's error on to its user
    passed_on = C.pd_prefill_waiting(waiting_result([(502, 0.0)], passed_on=2))(data([]))
    assert status(passed_on) == "fail" and "decode-only" in passed_on.hint
    # nothing was waiting on the victim: the act proved nothing
    idle = C.pd_prefill_waiting(waiting_result([]))(data([]))
    assert status(idle) == "inconclusive"
    role = C.pd_prefill_waiting(waiting_result([(200, 0.1)], act="to_zero"))(data([]))
    assert "on the prefill role" in role.observed


@pytest.mark.unit
def test_the_decode_pods_failed_prefills_are_counted_from_their_logs(tmp_path):
    from harness.pd import decode_fallbacks

    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(
        "INFO 12-06 13:19:10 [rollcheck-sim] P/D r1: prefill at http://127.0.0.1:4100/v1/chat"
        "/completions: HTTP 502\n"
        "INFO 12-06 13:19:11 [rollcheck-sim] P/D r2: prefill at http://127.0.0.1:4100/v1/chat"
        "/completions: ConnectionRefusedError [Errno 111] Connect call failed ('127.0.0.1', "
        "4100); prefilled here instead (fallback)\n"
    )
    b.write_text(
        "INFO 12-06 13:19:12 [rollcheck-sim] P/D r3: prefill at http://127.0.0.1:4100/v1/chat"
        "/completions: HTTP 502; prefilled here instead (fallback)\n"
        "INFO 12-06 13:19:12 [rollcheck-sim] P/D chatcmpl-r4: KV from 127.100.1.2:4001 "
        "(weights v1)\n"
    )
    view = decode_fallbacks([a, b, tmp_path / "gone.log"])
    assert (view["passed_on"], view["fallback"]) == (1, 2)
    assert view["why"]["HTTP 502"] == 2
    assert "ConnectionRefusedError [Errno 111] Connect call failed ('...', ...)" in view["why"]
