"""The local gateway's mirror reader: what makes nginx's mirror a shadow of a streaming
engine.

nginx's mirror module reads only the headers of its subrequest's answer and then closes
the connection (the subrequest is header-only). A streaming engine sends its headers at
once and sees the client gone: it aborts the answer (measured with vLLM's behaviour in
the simulator, docs/facts.md). A shadow must let the candidate decode every mirrored
request to its end, as Envoy's request mirroring does (it reads the shadow's whole answer
and drops it). So nginx mirrors to this reader, which answers 204 at once, then sends the
same request to nginx's candidate server and reads that whole answer, discarding it
(nginx logs it there, in mirror.log). Memory stays bounded: a fixed read size, a cap on
the requests it holds at once (more are dropped, and the drop counted).

    python -m harness.cluster.local.mirror_reader LISTEN_HOST:PORT FORWARD_HOST:PORT
"""

from __future__ import annotations

import asyncio
import sys

MAX_HEAD = 64 * 1024  # a request's line and headers
MAX_BODY = 16 * 1024 * 1024  # a request's body (nginx's client_max_body_size is smaller)
MAX_OPEN = 4096  # mirrored requests read at once
READ = 64 * 1024
NO_CONTENT = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class Reader:
    def __init__(self, forward: tuple[str, int]):
        self.forward = forward
        self.open = 0
        self.dropped = 0
        # the handlers' tasks, held: asyncio holds only a weak reference to a task, and
        # one waiting on a socket with no other reference to it was collected mid-answer
        self.tasks: set[asyncio.Task] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self.tasks.add(task)
        try:
            await self._handle(reader, writer)
        finally:
            self.tasks.discard(task)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if len(head) > MAX_HEAD:
                return
            length = _content_length(head)
            body = await reader.readexactly(length) if 0 < length <= MAX_BODY else b""
            writer.write(NO_CONTENT)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return
        finally:
            writer.close()
        if self.open >= MAX_OPEN:
            self.dropped += 1
            return
        self.open += 1
        try:
            await self._read_answer(_as_one_request(head), body)
        finally:
            self.open -= 1

    async def _read_answer(self, head: bytes, body: bytes) -> None:
        """The request to the candidate's server, and its whole answer read and dropped."""
        try:
            r, w = await asyncio.open_connection(*self.forward)
        except OSError:
            return
        try:
            w.write(head + body)
            await w.drain()
            while await r.read(READ):
                pass
        except (ConnectionError, OSError):
            pass
        finally:
            w.close()


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                return int(value.strip())
            except ValueError:
                return 0
    return 0


def _as_one_request(head: bytes) -> bytes:
    """The head with `Connection: close`: one request on the connection, its answer read
    to the close."""
    lines = [ln for ln in head.split(b"\r\n") if ln and not ln.lower().startswith(b"connection:")]
    return b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n"


async def serve(listen: tuple[str, int], forward: tuple[str, int]) -> None:
    reader = Reader(forward)
    server = await asyncio.start_server(reader.handle, *listen, limit=MAX_HEAD, backlog=2048)
    async with server:
        await server.serve_forever()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: mirror_reader LISTEN_HOST:PORT FORWARD_HOST:PORT", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(_address(argv[0]), _address(argv[1])))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
