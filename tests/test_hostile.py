"""Hostile servers and hostile files (issue 27): each case gives a record or one line,
memory stays bounded, nothing is written through a link."""

from __future__ import annotations

import json
import os
import threading
import time
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.client import Cancel, chat_payload, make_client, redact, stream_request
from harness.config import ConfigError, apply_sets, load_yaml
from harness.files import (
    BadInput,
    UnsafeDestination,
    open_append,
    read_json,
    write_atomic,
)
from harness.streams import StreamRecord, Thresholds, write_jsonl
from tests.hostile import HostileServer
from tests.properties import bounded

pytestmark = pytest.mark.unit

TH = Thresholds(stall_timeout_s=3.0)


@pytest.fixture(scope="module")
def hostile():
    server = HostileServer()
    yield server
    server.close()


def fetch(hostile, case, th=TH, **kw):
    with make_client(th.stall_timeout_s) as client:
        return stream_request(
            client,
            f"{hostile.url}/{case}/v1/chat/completions",
            chat_payload(None, "hi", 8),
            th,
            **kw,
        )


# --- hostile servers ------------------------------------------------------------------
def test_a_wrongly_typed_finish_reason_is_one_not_sse_record_naming_the_field(hostile):
    record = fetch(hostile, "bad-finish")
    assert record.outcome == "not_sse"
    assert "finish_reason is list" in record.error


def test_a_line_without_an_end_is_cut_at_the_event_limit_with_little_memory(hostile):
    tracemalloc.start()
    try:
        t0 = time.monotonic()
        record = fetch(hostile, "no-newline")
        took = time.monotonic() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert record.outcome == "not_sse" and record.error.startswith("event over 1048576 bytes")
    assert record.bytes < 4 * 1024 * 1024  # read once up to the limit, then the stream ended
    assert peak < 16 * 1024 * 1024, f"peak {peak} bytes"
    assert took < TH.stall_timeout_s  # not held until the stall timeout


def test_a_50_mb_event_is_judged_without_holding_it(hostile):
    th = Thresholds(stall_timeout_s=30)
    tracemalloc.start()
    try:
        record = fetch(hostile, "huge-event", th)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert record.outcome == "not_sse" and "event over" in record.error
    assert peak < 16 * 1024 * 1024, f"peak {peak} bytes"


def test_the_client_asks_for_identity_so_a_compressing_proxy_is_judged(hostile):
    record = fetch(hostile, "gzip")
    assert hostile.headers["accept-encoding"] == "identity"
    assert record.outcome == "complete" and record.tokens == 2


@pytest.mark.parametrize(
    "case, encoding",
    [("gzip-anyway", "gzip"), ("deflate-anyway", "deflate"), ("raw-deflate", "deflate")],
)
def test_a_body_compressed_although_identity_was_asked_for_is_decoded_and_judged(
    hostile, case, encoding
):
    record = fetch(hostile, case)
    assert record.outcome == "complete" and record.tokens == 2, record
    assert record.content_encoding == encoding


def test_an_encoding_rollcheck_cannot_decode_is_not_sse_naming_it(hostile):
    record = fetch(hostile, "br-anyway")
    assert record.outcome == "not_sse" and record.content_encoding == "br"
    assert "Content-Encoding br although identity was asked for" in record.error, record.error


def test_a_compression_bomb_is_judged_with_little_memory(hostile):
    import resource

    from tests.hostile import gzip_bomb

    assert len(gzip_bomb()) < 1 << 20  # under a megabyte on the wire, 256 MB inflated
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    record = fetch(hostile, "gzip-bomb")
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert record.outcome == "not_sse" and record.content_encoding == "gzip", record
    assert grew_mb < 200, f"the client's memory grew {grew_mb:.0f} MB"


@pytest.mark.parametrize("case", ["short-length", "after-body"])
def test_bytes_past_the_framing_never_become_another_requests_answer(hostile, case):
    """Two requests in a row on one client: the second never reads the first's leftover."""
    with make_client(TH.stall_timeout_s) as client:
        url = f"{hostile.url}/{case}/v1/chat/completions"
        records = [stream_request(client, url, chat_payload(None, "hi", 8), TH) for _ in range(2)]
    assert [r.model for r in records] == ["hostile", "hostile"]
    assert all("intruder" not in (r.model or "") for r in records)
    if case == "short-length":
        assert {r.outcome for r in records} == {"truncated"}
        assert all("Content-Length" in r.error for r in records)
    else:
        assert {r.outcome for r in records} == {"complete"}


def test_an_echoed_api_key_is_removed_from_the_record(hostile):
    key = "sk-hostile-0123456789"
    record = fetch(hostile, "echo-auth", headers={"Authorization": f"Bearer {key}"})
    assert hostile.headers["authorization"] == f"Bearer {key}"  # it was sent
    assert key not in record.to_json() and "[redacted]" in record.error


def test_redact_reaches_every_text_of_a_record():
    rec = StreamRecord("r", "complete", 0.0, 1.0, error="k=SECRETKEY", model="SECRETKEY")
    rec.usage = {"note": ["SECRETKEY"]}
    out = redact(rec, ["SECRETKEY"])
    assert "SECRETKEY" not in out.to_json()


@pytest.mark.parametrize("case", ["silent", "mute"])
def test_cancel_ends_a_silent_stream_at_once_as_cancelled(hostile, case):
    """After its headers, or before them (a server that never answers)."""
    cancel = Cancel()
    got = []
    t = threading.Thread(
        target=lambda: got.append(fetch(hostile, case, Thresholds(60), cancel=cancel))
    )
    t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    cancel.set()
    t.join(10)
    assert not t.is_alive() and time.monotonic() - t0 < 2
    assert got[0].outcome == "cancelled"


# --- files ------------------------------------------------------------------------------
def test_writes_refuse_a_link_and_leave_its_target_alone(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    for name in ("summary.json", "report.html"):
        (tmp_path / name).symlink_to(victim)
        with pytest.raises(UnsafeDestination, match="symbolic link"):
            write_atomic(tmp_path / name, "x")
    (tmp_path / "records.jsonl").symlink_to(victim)
    with pytest.raises(UnsafeDestination):
        write_jsonl([], tmp_path / "records.jsonl")
    with pytest.raises(UnsafeDestination):
        open_append(tmp_path / "records.jsonl")
    os.mkfifo(tmp_path / "events.jsonl")
    with pytest.raises(UnsafeDestination, match="not a regular file"):
        open_append(tmp_path / "events.jsonl")  # no reader: would block without O_NONBLOCK
    assert victim.read_text() == "precious"


def test_a_whole_file_is_replaced_never_left_half_written(tmp_path):
    path = tmp_path / "summary.json"
    write_atomic(path, "old")

    def pieces():
        yield "new, half"
        raise RuntimeError("the writer died")

    with pytest.raises(RuntimeError):
        write_atomic(path, pieces())
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temporary left


def test_read_json_refuses_arrays_huge_files_and_fifos_in_one_line(tmp_path):
    (tmp_path / "a.json").write_text("[1, 2]")
    with pytest.raises(BadInput, match="holds a JSON list"):
        read_json(tmp_path / "a.json")
    (tmp_path / "big.json").write_text(" " * 2000)
    with pytest.raises(BadInput, match="over rollcheck's 1000 byte limit"):
        read_json(tmp_path / "big.json", limit=1000)
    os.mkfifo(tmp_path / "f.json")
    with pytest.raises(BadInput, match="not a regular file"):
        read_json(tmp_path / "f.json")


# --- config -----------------------------------------------------------------------------
BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_a_yaml_alias_bomb_is_one_line_within_a_second(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    assert len(BOMB) < 500
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="alias bomb"):
        load_yaml(path)
    assert time.monotonic() - t0 < 1.0


@pytest.mark.parametrize(
    "text, message",
    [
        (b"slo: {ttft_s: 1}\n\xff\n", "not UTF-8"),
        (b"[" * 5000, "nested too deeply|invalid YAML"),
        (b"- a\n- b\n", "must be a mapping"),
    ],
)
def test_bad_config_files_are_one_line(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_bytes(text)
    with pytest.raises(ConfigError, match=message):
        load_yaml(path)


@pytest.mark.parametrize(
    "sets, message",
    [
        (["slo.ttft_s=.nan"], "finite"),
        (["slo.stall_timeout_s=.inf"], "finite"),
        (["engine=5"], "engine: expected a mapping"),
        (["load.users=99999999999"], "out of range"),
        (["slo.stall_timeout_s=1.0e+12"], "a typo"),
    ],
)
def test_absurd_values_are_refused_with_the_keys_name(sets, message):
    from harness.config.schema import load_config

    with pytest.raises(ConfigError, match=message):
        load_config(None, sets)


def test_a_secret_in_a_bad_set_is_never_echoed():
    from harness.config.schema import load_config

    with pytest.raises(ConfigError) as exc:
        load_config(None, ["kube.api_token=sk-live-987654321"])
    assert "sk-live-987654321" not in str(exc.value) and "<hidden>" in str(exc.value)


@pytest.mark.parametrize(
    "sets, message",
    [
        (["kube.gateway_url=http://me:hunter2@gw.example:80"], "carries a user name or password"),
        (["kube.gateway_url=gw.example:80"], "is not an http:// or https:// URL"),
        (["kube.gateway_url=me:hunter2@gw.example"], "it is not an http:// or https:// URL"),
        (["kube.gateway_url=[http://me:hunter2@gw]"], "expected text, got <hidden>"),
        (["engine.pd_role=decode", "engine.pd_prefill_url=http://:hunter2@p:80"], "carries a user"),
    ],
)
def test_a_url_given_to_rollcheck_is_checked_and_a_password_in_it_never_echoed(sets, message):
    """A URL is printed and written into the run folder: one carrying a password is refused,
    before anything is sent, without repeating the password; the key's place is an
    environment variable."""
    from harness.config.schema import load_config

    with pytest.raises(ConfigError, match=message) as exc:
        load_config(None, sets)
    assert "hunter2" not in str(exc.value)


yaml_text = st.text(alphabet=st.sampled_from(list("ab: -[]{}&*,\n'\"!|>#%@`0.\t")), max_size=200)


@bounded(150)
@given(text=yaml_text, sets=st.lists(st.text(max_size=30), max_size=3))
def test_any_config_text_and_sets_give_a_config_or_one_config_error(tmp_path_factory, text, sets):
    from harness.config.schema import load_config

    path = tmp_path_factory.mktemp("cfg") / "c.yaml"
    path.write_text(text)
    try:
        load_config(path, sets)
    except ConfigError as exc:
        assert "\n" not in str(exc).strip()


def test_apply_sets_parses_a_value_with_the_same_bounds():
    out = apply_sets({}, ["load.users=&a [*a]"])
    assert out["load"]["users"] == "&a [*a]"  # not YAML it can load: kept as text, then refused


def test_report_inputs_are_checked_in_shape(tmp_path):
    from harness.report.html import write_report

    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps([{"verdict": "pass"}]))
    with pytest.raises(BadInput, match="holds a JSON list"):
        write_report(run)
    (run / "summary.json").write_text(
        json.dumps({"verdict": "pass", "outcomes": {"complete": "<b>"}})
    )
    (run / "records.jsonl").write_text(
        json.dumps({"request_id": "r", "outcome": "complete", "sent_at": "<img>", "duration_s": 1})
        + "\n"
    )
    with pytest.raises(BadInput, match="field sent_at is str"):
        write_report(run)
    (run / "records.jsonl").write_text("")
    (run / "events.jsonl").write_text("[1]\n")
    with pytest.raises(BadInput, match="events.jsonl:1: not a rollcheck event"):
        write_report(run)
    # a kind rollcheck never writes (a typo of "ready") would match no check: refused
    (run / "events.jsonl").write_text(json.dumps({"t": 1.0, "kind": "redy", "pod": "p"}) + "\n")
    with pytest.raises(BadInput, match="events.jsonl:1: not a rollcheck event \\(kind 'redy' is"):
        write_report(run)
