"""A lean HTTP/1.1 client for one streamed answer on a connection of its own.

Why: a Locust worker reading streams through httpx spent about 110 us of CPU an event
(httpcore, h11 and their context managers) against 24 us for the socket's own recv; a
worker at 1,000 streams of 20 tokens/s needs that cut to a third (issue 41). What a
streamed chat answer needs is small: connect (TLS when https), send one POST, read the
status line and headers, then the body as its framing says (chunked, Content-Length, or
to the close), each recv handed on at once. No connection is kept for another request
(harness.client says why), so there is no pool to manage.

It refuses what httpx (h11) refuses, with the exceptions named as httpx names them, so
a record's error reads the same whichever client read it: ConnectError, ConnectTimeout,
ReadTimeout, WriteTimeout, PoolTimeout, ReadError, WriteError, RemoteProtocolError,
UnsupportedProtocol. Memory is bounded whatever the server sends: a response head is at
most MAX_HEAD bytes, a chunk's size line and the trailers at most MAX_LINE each, and a
chunk's data is handed on as it arrives, never gathered.
"""

from __future__ import annotations

import re
import socket
import ssl
import struct
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

from harness.errors import RollcheckError

MAX_HEAD = 64 * 1024  # a response's status line and headers (h11 allows 16 KiB)
MAX_LINE = 4096  # a chunk's size line, or one trailer line
READ_SIZE = 64 * 1024


class HttpFailure(RollcheckError):
    """One request's failure, by what failed (the names are httpx's). stream_request
    turns each into its record's outcome and error; none escapes it."""


class ConnectError(HttpFailure):
    pass


class ConnectTimeout(HttpFailure):
    pass


class UnsupportedProtocol(HttpFailure):
    pass


class PoolTimeout(HttpFailure):
    pass


class ReadTimeout(HttpFailure):
    pass


class WriteTimeout(HttpFailure):
    pass


class ReadError(HttpFailure):
    pass


class WriteError(HttpFailure):
    pass


class RemoteProtocolError(HttpFailure):
    pass


class LocalProtocolError(HttpFailure):
    """A request that cannot be sent as it is (a header value with a line break)."""


class Headers:
    """A response's headers: get(name) is case-insensitive, and a header sent more than
    once reads as its values joined with ", " (as httpx reads them)."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._values: dict[str, list[str]] = {}
        for name, value in pairs:
            self._values.setdefault(name.lower(), []).append(value)

    def get(self, name: str, default: str | None = None) -> str | None:
        values = self._values.get(name.lower())
        return ", ".join(values) if values else default

    def values(self, name: str) -> list[str]:
        return self._values.get(name.lower(), [])


_HEAD_END = re.compile(rb"\r?\n\r?\n")
_STATUS = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?: [^\r\n]*)?\r?")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


# the kernel's receive time of what a read returns (Linux: SOL_SOCKET, SO_TIMESTAMPNS)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_STAMP_SPACE = socket.CMSG_SPACE(16)


class _Reader:
    """A connection's reads. stamped: each read also asks the kernel when what it returns
    arrived (arrived_at, epoch seconds), so the time a chunk waited in the socket for the
    client to come round to it is measured, not guessed. Linux stamps a TCP read with its
    last segment's arrival: where several piled up, the first waited longer (the event
    loop's lateness, measured beside it, covers that). Plain TCP only: a TLS socket's
    reads return decrypted records, with no receive time."""

    def __init__(self, sock: socket.socket, stamped: bool) -> None:
        self.sock = sock
        self.stamped = stamped
        self.arrived_at: float | None = None

    def recv(self) -> bytes:
        try:
            if not self.stamped:
                return self.sock.recv(READ_SIZE)
            data, ancillary, _, _ = self.sock.recvmsg(READ_SIZE, _STAMP_SPACE)
        except TimeoutError as exc:
            raise ReadTimeout("timed out") from exc
        except OSError as exc:  # ssl.SSLError among them
            raise ReadError(str(exc)) from exc
        self.arrived_at = None  # a read without a stamp claims nothing
        for level, kind, stamp in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(stamp) >= 16:
                sec, ns = _TIMESPEC.unpack_from(stamp)
                self.arrived_at = sec + ns * 1e-9
        return data


_TIMESPEC = struct.Struct("qq")
_keeper: list[socket.socket] = []


def keep_stamps_on() -> None:
    """Keep the kernel stamping what arrives, for as long as this process lives. Linux
    stamps received packets only while some socket asks for it, and turns that on and
    off a moment after the first asks and the last closes (a deferred switch): streams
    one after another, each on a socket of its own, found about 1 read in 60 without a
    stamp. One idle socket that asks, held open, keeps it on."""
    if not _keeper:
        keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        keeper.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        _keeper.append(keeper)


class Response:
    """The status and headers of an answer, and its body as it arrives (iter_raw);
    arrived_at: when the latest piece iter_raw gave reached the socket (epoch seconds;
    None unless the reads are stamped)."""

    def __init__(self, reader: _Reader, status: int, headers: Headers, rest: bytes) -> None:
        self._reader = reader
        self.status_code = status
        self.headers = headers
        self._rest = rest
        self._framing = _framing(status, headers)

    def iter_raw(self) -> Iterator[bytes]:
        """The body's bytes as the server sent them (Content-Encoding left as it came),
        one piece a read; RemoteProtocolError when the framing is broken or the body ends
        early, ReadTimeout when nothing arrives within the read timeout."""
        kind, length = self._framing
        if kind == "none":
            return
        if kind == "chunked":
            chunks = _Chunked()
            data = self._rest
            while True:
                if data:
                    out = chunks.feed(data)
                    if out:
                        yield out
                    if chunks.done:
                        return  # anything after the last chunk goes with the connection
                data = self._reader.recv()
                if not data:
                    raise RemoteProtocolError(
                        "peer closed connection without sending complete message body "
                        "(incomplete chunked read)"
                    )
        if kind == "length":
            left = length
            data = self._rest
            while left:
                if data:
                    piece = data[:left] if len(data) > left else data
                    left -= len(piece)
                    yield piece
                    if not left:
                        return
                data = self._reader.recv()
                if not data:
                    raise RemoteProtocolError(
                        "peer closed connection without sending complete message body "
                        f"(received {length - left} bytes, expected {length})"
                    )
            return
        data = self._rest  # to the close
        while True:
            if data:
                yield data
            data = self._reader.recv()
            if not data:
                return

    @property
    def arrived_at(self) -> float | None:
        return self._reader.arrived_at

    def close(self) -> None:
        try:
            self._reader.sock.close()
        except OSError:
            pass


def _framing(status: int, headers: Headers) -> tuple[str, int]:
    """How the body ends: ("none"|"chunked"|"close", 0) or ("length", n)."""
    if status < 200 or status in (204, 304):
        return "none", 0
    codings = [c.strip().lower() for v in headers.values("transfer-encoding") for c in v.split(",")]
    codings = [c for c in codings if c]
    if codings:
        if codings != ["chunked"]:
            raise RemoteProtocolError(
                f"unsupported Transfer-Encoding {', '.join(codings)[:80]!r} (only chunked is)"
            )
        return "chunked", 0
    lengths = {
        one.strip() for value in headers.values("content-length") for one in value.split(",")
    }
    if lengths:
        if len(lengths) > 1 or not all(v.isdigit() and v.isascii() for v in lengths):
            raise RemoteProtocolError(f"bad Content-Length {sorted(lengths)[:3]!r}"[:120])
        return "length", int(lengths.pop())
    return "close", 0


class _Chunked:
    """Chunked transfer coding, undone incrementally: feed() the bytes as they arrive, get
    the data they carry; done once the last chunk and its trailers are in."""

    SIZE, DATA, DATA_END, TRAILER = range(4)

    def __init__(self) -> None:
        self.state = self.SIZE
        self.left = 0
        self.line = b""
        self.done = False

    def feed(self, data: bytes) -> bytes:
        out: list[bytes] = []
        i, n = 0, len(data)
        while i < n and not self.done:
            if self.state == self.DATA:
                take = min(self.left, n - i)
                out.append(data[i : i + take] if take < n else data)
                i += take
                self.left -= take
                if not self.left:
                    self.state = self.DATA_END
                continue
            if self.line:  # a line begun in an earlier read (bounded: MAX_LINE)
                data, i, n = self.line + data[i:], 0, len(self.line) + n - i
                self.line = b""
            j = data.find(b"\r\n", i)
            if j < 0:
                self.line = data[i:]
                if len(self.line) > MAX_LINE:
                    raise RemoteProtocolError(f"a chunk's framing line over {MAX_LINE} bytes")
                break
            line, i = data[i:j], j + 2
            if self.state == self.SIZE:
                self._size(line)
            elif self.state == self.DATA_END:
                if line:
                    raise RemoteProtocolError("a chunk's data was not followed by CRLF")
                self.state = self.SIZE
            elif not line:  # TRAILER: the empty line ends the message
                self.done = True
        if len(out) == 1:
            return out[0]
        return b"".join(out)

    def _size(self, line: bytes) -> None:
        text = line.split(b";", 1)[0].strip(b" \t")
        if _HEX.fullmatch(text) is None:
            raise RemoteProtocolError(f"malformed chunk size line {line[:40]!r}")
        size = int(text, 16)
        if size:
            self.left, self.state = size, self.DATA
        else:
            self.state = self.TRAILER


def open_stream(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    connect_timeout_s: float,
    read_timeout_s: float,
    tls: ssl.SSLContext,
    on_socket: Callable[[socket.socket], None] | None = None,
    stamped: bool = False,
) -> Response:
    """POST body to url on a new connection and read the answer's head (the body is the
    Response's iter_raw()). on_socket is given the socket once connected, before anything
    is sent (a Cancel watches it); stamped: the Response's arrived_at is kept (plain
    http only). The caller closes the Response."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise UnsupportedProtocol(
            f"Request URL has an unsupported protocol '{parts.scheme}://'."
            if parts.scheme
            else "Request URL is missing an 'http://' or 'https://' protocol."
        )
    host = parts.hostname
    if not host:
        raise UnsupportedProtocol(f"Request URL has no host: {url[:120]}")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError as exc:
        raise UnsupportedProtocol(f"Request URL has a bad port: {url[:120]}") from exc
    sock = _connect(host, port, scheme == "https", connect_timeout_s, tls)
    try:
        stamped = stamped and scheme == "http"
        if stamped:  # before the request goes: an answer's first bytes can beat the next line
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        if on_socket is not None:
            on_socket(sock)
        sock.settimeout(read_timeout_s)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        netloc = f"[{host}]" if ":" in host else host
        if parts.port:
            netloc += f":{parts.port}"
        lines = [f"POST {target} HTTP/1.1", f"Host: {netloc}"]
        for name, value in headers.items():
            if _TOKEN.fullmatch(name.encode("latin-1", "replace")) is None or any(
                c in str(value) for c in "\r\n\0"
            ):
                raise LocalProtocolError(
                    f"header {name[:40]!r}: a bad name, or a line break in its value"
                )
            lines.append(f"{name}: {value}")
        lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
        head = "\r\n".join(lines).encode("latin-1")
        try:
            sock.sendall(head + body)
        except TimeoutError as exc:
            raise WriteTimeout("timed out") from exc
        except OSError as exc:
            raise WriteError(str(exc)) from exc
        return _read_head(_Reader(sock, stamped))
    except BaseException:
        sock.close()
        raise


def _connect(
    host: str, port: int, https: bool, timeout_s: float, tls: ssl.SSLContext
) -> socket.socket:
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except TimeoutError as exc:
        raise ConnectTimeout("timed out") from exc
    except OSError as exc:
        raise ConnectError(str(exc)) from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if not https:
        return sock
    try:
        return tls.wrap_socket(sock, server_hostname=host)
    except TimeoutError as exc:
        sock.close()
        raise ConnectTimeout("timed out") from exc
    except OSError as exc:  # ssl.SSLError among them: a certificate refused
        sock.close()
        raise ConnectError(str(exc)) from exc


def _read_head(reader: _Reader) -> Response:
    """The first final response's head (a 1xx before it is skipped)."""
    buf = b""
    while True:
        found = _HEAD_END.search(buf)
        while found is None:
            if len(buf) > MAX_HEAD:
                raise RemoteProtocolError(f"response head over {MAX_HEAD} bytes")
            data = reader.recv()
            if not data:
                raise RemoteProtocolError("Server disconnected without sending a response.")
            buf += data
            found = _HEAD_END.search(buf, max(0, len(buf) - len(data) - 4))
        head, rest = buf[: found.start()], buf[found.end() :]
        status, headers = _parse_head(head)
        if status >= 200 or status == 101:
            return Response(reader, status, headers, rest)
        buf = rest  # 100 Continue and the like: the real answer follows


def _parse_head(head: bytes) -> tuple[int, Headers]:
    lines = head.split(b"\n")
    match = _STATUS.fullmatch(lines[0])
    if match is None:
        raise RemoteProtocolError(f"malformed status line {lines[0][:60]!r}")
    pairs: list[tuple[str, str]] = []
    for raw in lines[1:]:
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if line[:1] in (b" ", b"\t"):
            if not pairs:
                raise RemoteProtocolError("a header continuation line before any header")
            name, value = pairs[-1]
            more = line.strip(b" \t").decode("latin-1")
            pairs[-1] = (name, f"{value} {more}")
            continue
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            raise RemoteProtocolError(f"malformed header line {line[:60]!r}")
        pairs.append((name.decode("ascii"), value.strip(b" \t").decode("latin-1")))
    return int(match.group(1)), Headers(pairs)
