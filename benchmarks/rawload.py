"""A minimal raw-socket streaming client, for driving load with little overhead."""

from __future__ import annotations

import asyncio
import json
import random


def request_bytes(host: str, port: int, max_tokens: int, rid: str) -> bytes:
    body = json.dumps(
        {
            "model": "rollcheck-sim",
            "messages": [{"role": "user", "content": f"bench {rid}"}],
            "stream": True,
            "max_tokens": max_tokens,
            "ignore_eos": True,
        }
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nX-Request-Id: {rid}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class _Counter(asyncio.Protocol):
    """Counts SSE events as bytes arrive: no StreamReader, no per-read coroutine."""

    def __init__(self, done: asyncio.Future):
        self.done, self.events = done, 0

    def data_received(self, data: bytes) -> None:
        self.events += data.count(b"data: ")

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(self.events)


async def one_stream(host: str, port: int, max_tokens: int, rid: str, delay_s: float = 0) -> int:
    await asyncio.sleep(delay_s)
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    transport, _ = await loop.create_connection(lambda: _Counter(done), host, port)
    transport.write(request_bytes(host, port, max_tokens, rid))
    try:
        return await done
    finally:
        transport.close()


async def run_streams(
    host: str, port: int, n: int, max_tokens: int, ramp_s: float = 0.0, on_ramped=None
) -> int:
    """n concurrent streams arriving at random over ramp_s; on_ramped() runs once all are open.

    Arrivals are uniform random (seeded), as independent users arrive. Evenly spaced
    arrivals (ramp_s/n apart) would put every stream into a handful of phases of the
    token interval (4 phases for 200 streams over 1 s at 20 ms), a lockstep that
    independent clients do not produce.
    """
    rng = random.Random(n)
    tasks = [
        asyncio.ensure_future(one_stream(host, port, max_tokens, f"b{i}", rng.uniform(0, ramp_s)))
        for i in range(n)
    ]
    if on_ramped is not None:
        await asyncio.sleep(ramp_s + 0.5)
        await asyncio.to_thread(on_ramped)
    return sum(await asyncio.gather(*tasks))
