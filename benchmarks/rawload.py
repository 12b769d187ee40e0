"""A minimal raw-socket streaming client, for driving load with little overhead."""

from __future__ import annotations

import asyncio
import json


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


async def one_stream(host: str, port: int, max_tokens: int, rid: str, delay_s: float = 0) -> int:
    await asyncio.sleep(delay_s)
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(request_bytes(host, port, max_tokens, rid))
    events = 0
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            break
        events += chunk.count(b"data: ")
    writer.close()
    return events


async def run_streams(
    host: str, port: int, n: int, max_tokens: int, ramp_s: float = 0.0, on_ramped=None
) -> int:
    """n concurrent streams, arrivals spread over ramp_s; on_ramped() runs once all are open."""
    tasks = [
        asyncio.ensure_future(one_stream(host, port, max_tokens, f"b{i}", ramp_s * i / n))
        for i in range(n)
    ]
    if on_ramped is not None:
        await asyncio.sleep(ramp_s + 0.5)
        await asyncio.to_thread(on_ramped)
    return sum(await asyncio.gather(*tasks))
