"""A hostile OpenAI-compatible server on loopback: one path per way a server can hurt a
client (issue 27). Raw sockets, so every byte and every framing mistake is exact.

  /forever        tokens every 20 ms, never an end
  /silent         headers, then nothing
  /mute           not even headers: the request is read and never answered
  /no-newline     `data: ` then bytes without a line end, 64 KiB at a time, never an end
  /huge-event     one 50 MB event, then a normal end
  /bad-finish     "finish_reason": ["stop"]
  /echo-auth      an answer and an error event that repeat the Authorization header
  /gzip           gzip-compressed when the client accepts gzip, plain otherwise
  /gzip-anyway    gzip-compressed whatever the client asked for (a misconfigured proxy),
                  in several chunks
  /deflate-anyway zlib-wrapped deflate, whatever the client asked for
  /raw-deflate    raw deflate (no zlib wrapper, as some servers send "deflate")
  /br-anyway      Content-Encoding br (bytes the client cannot decode)
  /gzip-bomb      a gzip body of a few hundred KB that inflates to 256 MB of one event
  /short-length   Content-Length shorter than the body; the rest is a whole second
                  response (another model's answer) on the same connection
  /after-body     a complete chunked answer, then a second response after its end

`requests` counts what arrived, by path, and `headers` keeps the last request's headers.
"""

from __future__ import annotations

import functools
import gzip
import json
import socket
import socketserver
import threading
import time
import zlib
from collections import Counter

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"


def event(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def token(text: str, model: str = "hostile", finish=None) -> bytes:
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    return event(
        {"id": "chatcmpl-h", "object": "chat.completion.chunk", "model": model, "choices": [choice]}
    )


ANSWER = token("Hello") + token(" world") + token("", finish="stop") + b"data: [DONE]\n\n"
INTRUDER = token("I am another model's answer", model="intruder") + b"data: [DONE]\n\n"


@functools.cache
def gzip_bomb(mb: int = 256) -> bytes:
    """A gzip body of a few hundred KB that inflates to `mb` MB of one event's text
    (made once: the tests call it before the request, so its making is no stall)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"a" * (1 << 20)
    return c.compress(b"data: ") + b"".join(c.compress(block) for _ in range(mb)) + c.flush()


def chunked(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n" if data else b""


def read_request(sock: socket.socket) -> tuple[str, dict[str, str]] | None:
    """Read one whole HTTP request (its body too: closing with unread input makes the
    kernel send RST, which the client would rightly report as a reset): its path and its
    headers, lower-cased; None when the client closed first."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    while b"\r\n\r\n" not in buf:
        part = sock.recv(65536)
        if not part:
            return None
        buf += part
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    length = int(headers.get("content-length", 0))
    while len(body) < length:
        more = sock.recv(65536)
        if not more:
            break
        body += more
    return lines[0].split(" ")[1], headers


class Handler(socketserver.BaseRequestHandler):
    server: HostileServer

    def handle(self):
        sock: socket.socket = self.request
        request = read_request(sock)
        if request is None:
            return
        path, headers = request
        path = path.split("/v1/")[0].rstrip("/") or "/"
        with self.server.lock:
            self.server.requests[path] += 1
            self.server.headers = headers
        try:
            getattr(self, "case_" + path.strip("/").replace("-", "_"))(sock, headers)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # the client went away: what a hostile server does not care about

    # --- the cases ---------------------------------------------------------------------
    def case_forever(self, sock, headers):
        sock.sendall(HEAD + b"\r\n")
        while not self.server.closing.is_set():
            sock.sendall(chunked(token("x")))
            time.sleep(0.02)

    def case_silent(self, sock, headers):
        sock.sendall(HEAD + b"\r\n")
        self.server.closing.wait(120)

    def case_mute(self, sock, headers):
        self.server.closing.wait(120)

    def case_no_newline(self, sock, headers):
        sock.sendall(HEAD + b"\r\n" + chunked(b"data: "))
        piece = chunked(b"x" * 65536)
        while not self.server.closing.is_set():
            sock.sendall(piece)

    def case_huge_event(self, sock, headers):
        sock.sendall(HEAD + b"\r\n" + chunked(b'data: {"choices": [{"delta": {"content": "'))
        piece = chunked(b"y" * 65536)
        for _ in range(50 * 16):
            sock.sendall(piece)
        sock.sendall(chunked(b'"}}]}\n\n' + ANSWER) + b"0\r\n\r\n")

    def case_bad_finish(self, sock, headers):
        bad = event({"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": ["stop"]}]})
        sock.sendall(
            HEAD + b"\r\n" + chunked(token("Hi") + bad + b"data: [DONE]\n\n") + b"0\r\n\r\n"
        )

    def case_echo_auth(self, sock, headers):
        said = headers.get("authorization", "")
        body = token(f"you sent {said}") + event(
            {"error": {"message": f"bad key {said}", "code": 401}}
        )
        sock.sendall(HEAD + b"\r\n" + chunked(body + b"data: [DONE]\n\n") + b"0\r\n\r\n")

    def case_gzip(self, sock, headers):
        if "gzip" in headers.get("accept-encoding", ""):
            data = gzip.compress(ANSWER)
            sock.sendall(HEAD + b"Content-Encoding: gzip\r\n\r\n" + chunked(data) + b"0\r\n\r\n")
        else:
            sock.sendall(HEAD + b"\r\n" + chunked(ANSWER) + b"0\r\n\r\n")

    def _encoded(self, sock, name: bytes, data: bytes, pieces: int = 4) -> None:
        step = max(1, len(data) // pieces)
        body = b"".join(chunked(data[i : i + step]) for i in range(0, len(data), step))
        sock.sendall(HEAD + b"Content-Encoding: " + name + b"\r\n\r\n" + body + b"0\r\n\r\n")

    def case_gzip_anyway(self, sock, headers):
        self._encoded(sock, b"gzip", gzip.compress(ANSWER))

    def case_deflate_anyway(self, sock, headers):
        self._encoded(sock, b"deflate", zlib.compress(ANSWER))

    def case_raw_deflate(self, sock, headers):
        c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        self._encoded(sock, b"deflate", c.compress(ANSWER) + c.flush())

    def case_br_anyway(self, sock, headers):
        self._encoded(sock, b"br", b"\x8b\x03\x80" + ANSWER)  # not brotli rollcheck reads

    def case_gzip_bomb(self, sock, headers):
        self._encoded(sock, b"gzip", gzip_bomb(), pieces=4)

    def case_short_length(self, sock, headers):
        first = token("Hello")
        second = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Content-Length: %d\r\n\r\n" % len(INTRUDER) + INTRUDER
        )
        sock.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Content-Length: %d\r\n\r\n" % len(first) + first + second
        )
        self._linger(sock)

    def case_after_body(self, sock, headers):
        second = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"
        sock.sendall(
            HEAD + b"\r\n" + chunked(ANSWER) + b"0\r\n\r\n" + second % len(INTRUDER) + INTRUDER
        )
        self._linger(sock)

    def _linger(self, sock):
        """Keep the connection open (a reused one would read the leftover bytes)."""
        sock.settimeout(5)
        try:
            while sock.recv(65536):
                pass
        except OSError:
            pass


class HostileServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.headers: dict[str, str] = {}
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.closing.set()
        self.shutdown()
        self.server_close()
