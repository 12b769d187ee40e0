"""The real client over loopback against a raw-socket server replaying literal streams.

The server writes exact bytes with chunked framing, in one piece or one byte per
packet, and ends each case as it says: a clean end, a close mid-chunk, or a stall.
"""

from __future__ import annotations

import socket
import socketserver
import threading
import time

import pytest

from harness.client import chat_payload, http_get, make_client, stream_request, tls_context
from harness.streams import Thresholds
from tests.hostile import read_request
from tests.streamcases import CASES, Case

pytestmark = pytest.mark.unit

BY_NAME = {c.name: c for c in CASES}
STALL_S = 0.6


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        try:
            self.answer()
        except (ConnectionResetError, BrokenPipeError):
            pass  # the client closed first (it judged the stream already): nothing to send

    def answer(self):
        sock: socket.socket = self.request
        request = read_request(sock)
        if request is None:
            return
        _, kind, name, mode = request[0].split("/")
        if kind == "special":
            return self.special(sock, name)
        case = BY_NAME[name]
        reason = b"OK" if case.status == 200 else b"Error"
        status = b"HTTP/1.1 %d %s\r\n" % (case.status, reason)
        if case.content_type != "text/event-stream" and case.end == "eof":
            sock.sendall(
                status
                + b"Content-Type: %s\r\nContent-Length: %d\r\n\r\n"
                % (case.content_type.encode(), len(case.body))
                + case.body
            )
            return
        sock.sendall(
            status
            + b"Content-Type: "
            + case.content_type.encode()
            + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        body = case.body
        if mode == "bytes":
            for i in range(min(len(body), 300)):
                sock.sendall(b"1\r\n" + body[i : i + 1] + b"\r\n")
                time.sleep(0.0005)
            body = body[300:]
        if body:
            sock.sendall(b"%x\r\n" % len(body) + body + b"\r\n")
        if case.end == "eof":
            sock.sendall(b"0\r\n\r\n")
        elif case.end == "reset":
            sock.sendall(b"40\r\npartial")  # announces 64 bytes, sends 7, closes
        elif case.end == "stall":
            time.sleep(STALL_S * 3)

    def special(self, sock, name):
        if name == "close_during_headers":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Ty")
        elif name == "comments_only":
            sock.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            for _ in range(12):  # keep-alives every 0.2 s: the socket never idles
                sock.sendall(b"e\r\n: keep-alive\n\n\r\n")
                time.sleep(0.2)


@pytest.fixture(scope="module")
def server():
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def fetch(server, path, th=Thresholds(stall_timeout_s=STALL_S)):
    with make_client(th.stall_timeout_s) as client:
        return stream_request(client, server + path, chat_payload(None, "hi", 8), th)


@pytest.mark.parametrize("mode", ["whole", "bytes"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_client_reaches_the_rule_table_verdict(server, case: Case, mode):
    record = fetch(server, f"/case/{case.name}/{mode}")
    assert record.outcome == case.outcome, record.error
    assert record.flags == case.flags
    assert record.status == case.status


def test_polls_and_stream_clients_do_not_load_the_ca_bundle_each_time(server, monkeypatch):
    """httpx builds a TLS context, reading the whole CA bundle, for every client it makes,
    http:// or not; on a busy machine that took up to 21 s inside a poll with a 0.5 s
    timeout (docs/facts.md). rollcheck's polls and stream clients share one context."""
    import ssl

    import httpx

    tls_context()  # the process's one, built before the count starts
    built = []
    real = ssl.create_default_context
    monkeypatch.setattr(
        ssl, "create_default_context", lambda *a, **kw: built.append(1) or real(*a, **kw)
    )
    path = f"/case/{CASES[0].name}/whole"
    for _ in range(3):
        assert http_get(server + path, timeout=5).status_code == CASES[0].status
        assert fetch(server, path).status == CASES[0].status
    assert built == []
    httpx.get(server + path, timeout=5)  # what the polls were: a new context per call
    assert built == [1]


def test_close_during_headers_is_connect_error(server):
    record = fetch(server, "/special/close_during_headers/x")
    assert record.outcome == "connect_error" and record.status is None


def test_keep_alive_comments_do_not_hide_a_stall(server):
    t0 = time.monotonic()
    record = fetch(server, "/special/comments_only/x")
    assert record.outcome == "hung"
    assert record.comments >= 3
    assert time.monotonic() - t0 < 2.0  # gave up near the stall timeout, not at the end


def test_refused_connection(server):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: refused
        record = fetch(f"http://127.0.0.1:{port}", "/v1/chat/completions")
    assert record.outcome == "connect_error" and "ConnectError" in record.error


def test_cancelled_record_on_base_exception(server):
    """A caller stopped mid-stream (Locust killing a user) still gets its record."""
    got = []

    class Stop(BaseException):
        pass

    def on_headers():
        raise Stop

    th = Thresholds(stall_timeout_s=STALL_S)
    with make_client(STALL_S) as client, pytest.raises(Stop):
        stream_request(
            client,
            server + "/case/stall/whole",
            chat_payload(None, "hi", 8),
            th,
            on_record=got.append,
            on_headers=on_headers,
        )
    assert [r.outcome for r in got] == ["cancelled"]
