"""The lean HTTP/1.1 reader (harness.http1) against httpx, byte for byte, on a raw-socket
server replaying literal answers: every framing read alike, every broken one refused
alike (by the same exception's name); TLS, proxies, and bounded memory."""

from __future__ import annotations

import socket
import socketserver
import ssl
import threading
import time
import tracemalloc
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness import http1
from harness.client import chat_payload, make_client, stream_request
from harness.streams import Thresholds
from tests.hostile import ANSWER, read_request
from tests.properties import bounded

pytestmark = pytest.mark.unit

SSE = b"Content-Type: text/event-stream\r\n"
OK = b"HTTP/1.1 200 OK\r\n"


def chunk(data: bytes, ext: bytes = b"") -> bytes:
    return b"%x%s\r\n%s\r\n" % (len(data), ext, data)


# name -> the bytes the server sends after reading the request; it then closes
ANSWERS: dict[str, bytes] = {
    "chunked": OK + SSE + b"Transfer-Encoding: chunked\r\n\r\n" + chunk(ANSWER) + b"0\r\n\r\n",
    "chunk-extensions-and-trailers": OK
    + SSE
    + b"Transfer-Encoding: chunked\r\n\r\n"
    + chunk(ANSWER[:10], b";a=b")
    + chunk(ANSWER[10:])
    + b"0\r\nX-Trailer: 1\r\n\r\n",
    "length": OK + SSE + b"Content-Length: %d\r\n\r\n" % len(ANSWER) + ANSWER,
    "to-the-close": OK + SSE + b"\r\n" + ANSWER,
    "continue-first": b"HTTP/1.1 100 Continue\r\n\r\n" + OK + SSE + b"\r\n" + ANSWER,
    "lf-only-head": b"HTTP/1.1 200 OK\nContent-Type: text/event-stream\n\n" + ANSWER,
    "repeated-header": OK + SSE + b"X-A: 1\r\nX-A: 2\r\nContent-Length: 2\r\n\r\nhi",
    "no-content": b"HTTP/1.1 204 No Content\r\n\r\n",
    "error-page": b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy",
    "bytes-after-the-body": OK + b"Content-Length: 2\r\n\r\nhiHTTP/1.1 200 OK\r\n\r\nintruder",
    # broken framing: refused, by name
    "bad-chunk-size": OK + SSE + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    "no-crlf-after-data": OK + SSE + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
    "junk-after-chunk-data": OK
    + SSE
    + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX\r\n5\r\nworld\r\n0\r\n\r\n",
    "closed-mid-chunk": OK + SSE + b"Transfer-Encoding: chunked\r\n\r\n40\r\npartial",
    "closed-before-length": OK + SSE + b"Content-Length: 100\r\n\r\npartial",
    "gzip-transfer-coding": OK + SSE + b"Transfer-Encoding: gzip\r\n\r\n" + ANSWER,
    "conflicting-lengths": OK + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    "bad-status-line": b"HTTP/1.1 OK\r\n\r\n",
    "header-without-colon": OK + b"Content-Type text/event-stream\r\n\r\n" + ANSWER,
    "closed-in-the-head": OK + b"Content-Ty",
    "closed-before-answering": b"",
}


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        sock: socket.socket = self.request
        try:
            request = read_request(sock)
            if request is None:
                return
            self.server.seen.append(request)
            name = urlsplit(request[0]).path.split("/")[1]
            data = ANSWERS[name]
            step = self.server.step or len(data) or 1
            for i in range(0, len(data), step):
                sock.sendall(data[i : i + step])
                if self.server.step:
                    time.sleep(0.0002)
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(2)
            while sock.recv(4096):  # until the client closes: no RST cuts what was sent
                pass
        except OSError:
            pass


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, step: int = 0, tls: ssl.SSLContext | None = None):
        super().__init__(("127.0.0.1", 0), Handler)
        self.step, self.tls, self.seen = step, tls, []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def get_request(self):
        sock, addr = super().get_request()
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_side=True)
        return sock, addr

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture(scope="module", params=[0, 1], ids=["whole", "byte-by-byte"])
def server(request):
    srv = Server(step=request.param)
    yield srv
    srv.close()


def read(transport: str, url: str) -> tuple:
    """What a reader made of an answer: (status, content-type, x-a, body) or the name of
    what it raised."""
    with make_client(5, transport=transport) as client:
        try:
            with client.stream(url, b"{}", {"Accept": "text/event-stream"}) as response:
                body = b"".join(response.iter_raw())
                h = response.headers
                return response.status_code, h.get("content-type"), h.get("x-a"), body
        except Exception as exc:
            return type(exc).__name__


@pytest.mark.parametrize("name", ANSWERS)
def test_the_lean_reader_reads_every_answer_as_httpx_does(server, name):
    url = f"{server.url()}/{name}/v1"
    lean, reference = read("lean", url), read("httpx", url)
    assert lean == reference
    if name in ("chunked", "length", "to-the-close", "continue-first", "lf-only-head"):
        assert lean == (200, "text/event-stream", None, ANSWER)  # not two alike wrong ones


def test_a_stream_read_lean_judges_as_one_read_by_httpx(server):
    th = Thresholds(stall_timeout_s=5)
    records = {}
    for transport in ("lean", "httpx"):
        with make_client(5, transport=transport) as client:
            records[transport] = [
                stream_request(client, f"{server.url()}/{name}/v1", chat_payload(None, "hi", 8), th)
                for name in ANSWERS
            ]

    def name(error):  # what failed, by name; the words after it are each reader's own
        return error and error.split(":")[0]

    for lean, ref in zip(records["lean"], records["httpx"], strict=True):
        assert (lean.outcome, lean.status, lean.tokens, name(lean.error)) == (
            ref.outcome,
            ref.status,
            ref.tokens,
            name(ref.error),
        )
    assert {r.outcome for r in records["lean"]} >= {
        "complete",
        "reset",
        "http_error",
        "not_sse",
        "connect_error",
    }


def test_the_request_is_one_post_with_its_headers_and_body(server):
    with make_client(5, headers={"Authorization": "Bearer sk-test-1234"}) as client:
        record = stream_request(
            client,
            f"{server.url()}/chunked/v1?x=1",
            chat_payload("m", "héllo", 8),
            Thresholds(stall_timeout_s=5),
            request_id="rid-1",
        )
    assert record.outcome == "complete"
    line, headers = server.seen[-1]
    assert line == "/chunked/v1?x=1"
    assert headers["host"] == server.url().removeprefix("http://")
    assert headers["x-request-id"] == "rid-1" and headers["authorization"] == "Bearer sk-test-1234"
    assert headers["content-type"] == "application/json"
    assert headers["accept-encoding"] == "identity"


def test_a_header_with_a_line_break_is_never_sent(server):
    before = len(server.seen)
    with make_client(5) as client:
        record = stream_request(
            client,
            f"{server.url()}/chunked/v1",
            chat_payload(None, "hi", 8),
            Thresholds(stall_timeout_s=5),
            headers={"X-Api-Key": "abc\r\nX-Injected: 1"},
        )
    assert record.outcome == "connect_error" and "LocalProtocolError" in record.error
    assert "abc" not in record.error  # a secret's value is not repeated
    time.sleep(0.1)
    assert len(server.seen) == before


@given(
    body=st.binary(max_size=3000),
    sizes=st.lists(st.integers(1, 700), min_size=1, max_size=12),
    cuts=st.lists(st.integers(1, 400), max_size=30),
    ext=st.sampled_from([b"", b";name=value", b" ; x"]),
    trailers=st.sampled_from([b"", b"X-T: 1\r\n"]),
)
@bounded(300)
def test_chunked_framing_is_undone_exactly_however_the_reads_fall(body, sizes, cuts, ext, trailers):
    wire, i, k = b"", 0, 0
    while i < len(body):
        n = sizes[k % len(sizes)]
        wire += chunk(body[i : i + n], ext)
        i, k = i + n, k + 1
    wire += b"0\r\n" + trailers + b"\r\n" + b"leftover"
    decoder, out, at = http1._Chunked(), [], 0
    for cut in cuts + [len(wire)]:
        if at >= len(wire) or decoder.done:
            break
        out.append(decoder.feed(wire[at : at + cut]))
        at += cut
    assert decoder.done and b"".join(out) == body


def test_a_head_or_a_chunk_line_without_an_end_is_refused_with_little_memory():
    cases = {
        "endless-head": OK + b"X-Filler: " + b"a" * (4 << 20),
        "endless-chunk-line": OK + b"Transfer-Encoding: chunked\r\n\r\n" + b"1" * (4 << 20),
    }
    ANSWERS.update(cases)
    srv = Server()
    try:
        tracemalloc.start()
        for name in cases:
            assert read("lean", f"{srv.url()}/{name}/v1") == "RemoteProtocolError"
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        srv.close()
        for name in cases:
            del ANSWERS[name]
    assert peak < 2 << 20, f"peak {peak} bytes"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    from harness.cluster.kubelocal.controlplane import make_pki

    return make_pki(tmp_path_factory.mktemp("pki"))


def test_https_is_read_lean_with_the_ca_given_and_refused_without_it(pki):
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(pki["apiserver.crt"], pki["apiserver.key"])
    srv = Server(tls=tls)
    th = Thresholds(stall_timeout_s=5)
    try:
        url = f"{srv.url('https')}/chunked/v1"
        with make_client(5, verify=str(pki["ca.crt"])) as client:
            trusted = stream_request(client, url, chat_payload(None, "hi", 8), th)
        with make_client(5) as client:  # the system's CAs: this one is not among them
            untrusted = stream_request(client, url, chat_payload(None, "hi", 8), th)
        waits: list[float] = []
        with make_client(5, verify=str(pki["ca.crt"])) as client:
            client.on_arrival = waits.append  # a TLS read carries no receive time
            stream_request(client, url, chat_payload(None, "hi", 8), th)
    finally:
        srv.close()
    assert trusted.outcome == "complete" and trusted.tokens == 2
    assert untrusted.outcome == "connect_error"
    assert "ConnectError" in untrusted.error and "CERTIFICATE_VERIFY_FAILED" in untrusted.error
    assert waits == []


def test_a_proxy_in_the_environment_is_honoured_and_no_proxy_too(server, monkeypatch):
    """A user behind a proxy: the request goes through it (httpx speaks to proxies), as it
    did before the lean reader; NO_PROXY still goes direct."""
    target = "http://model.example:8000/chunked/v1/chat/completions"
    monkeypatch.setenv("HTTP_PROXY", server.url())
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    th = Thresholds(stall_timeout_s=5)
    with make_client(5) as client:
        record = stream_request(client, target, chat_payload(None, "hi", 8), th)
    assert record.outcome == "complete"
    assert server.seen[-1][0] == target  # the absolute form: it went to the proxy
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with make_client(5) as client:
        direct = stream_request(
            client, f"{server.url()}/chunked/v1", chat_payload(None, "hi", 8), th
        )
    assert direct.outcome == "complete" and server.seen[-1][0] == "/chunked/v1"


def test_a_piece_that_waited_in_its_socket_is_measured_from_its_arrival(server):
    """The kernel's receive time, not the read's: a client busy for 0.3 s after the
    headers (the body already in its socket) measures the body's wait as at least that;
    over TLS or through httpx nothing is claimed. Linux stamps a TCP read with its last
    segment's arrival: sent a byte at a time, the body's last bytes came later, and the
    wait measured is theirs (a floor for the first bytes' wait)."""
    waits: list[float] = []
    th = Thresholds(stall_timeout_s=5)
    with make_client(5) as client:
        client.on_arrival = waits.append
        record = stream_request(
            client,
            f"{server.url()}/length/v1",
            chat_payload(None, "hi", 8),
            th,
            on_headers=lambda: time.sleep(0.3),
        )
    assert record.outcome == "complete" and waits
    floor = 0.3 if not server.step else 0.01  # one segment / the last of many
    assert floor <= max(waits) < 5, waits  # the wall clock, as the kernel's stamp is
    before = len(waits)
    with make_client(5, transport="httpx") as client:
        client.on_arrival = waits.append
        stream_request(client, f"{server.url()}/length/v1", chat_payload(None, "hi", 8), th)
    assert len(waits) == before
