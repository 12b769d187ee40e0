"""Stream checker throughput and the client's timing error.

Run: .venv/bin/python -m benchmarks.bench_streams
1. events/s that the SSE parser + classifier handle on one core (no I/O);
2. client timing skew: the simulator stamps each chunk with its send time
   (--send-timestamps), the client compares with its arrival time; p50/p99 at
   50 and 300 concurrent streams, under gevent as inside a Locust worker, read by
   httpx and by the lean reader (harness.http1) side by side, with the client's CPU
   an event.
"""

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import time  # noqa: E402

import gevent.pool  # noqa: E402

from harness.client import chat_payload, make_client, stream_request  # noqa: E402
from harness.proc import free_port, running_sim  # noqa: E402
from harness.sim.settings import SimSettings  # noqa: E402
from harness.streams import End, StreamObserver, Thresholds  # noqa: E402
from harness.streams.summary import percentile  # noqa: E402


def parser_throughput(tokens: int = 500, rounds: int = 200, shortcut: bool = True) -> float:
    """Events/s through the parser and classifier; shortcut=False parses every token chunk
    (the judge before it learned the usual token chunk's shape)."""

    def ev(obj):
        return b"data: " + json.dumps(obj).encode() + b"\n\n"

    base = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    body = ev(base | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    tok = ev(
        base | {"choices": [{"index": 0, "delta": {"content": " word"}, "finish_reason": None}]}
    )
    body += tok * tokens + ev(
        base | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    )
    body += b"data: [DONE]\n\n"
    pieces = [body[i : i + 1500] for i in range(0, len(body), 1500)]  # about one packet each
    t0 = time.process_time()
    for _ in range(rounds):
        obs = StreamObserver("r", 0.0, Thresholds(30, 1, 1))
        if not shortcut:
            obs._learned = 10**9
        for i, p in enumerate(pieces):
            obs.chunk(p, i * 0.001) if obs.status else (
                obs.headers(200, "text/event-stream", 0),
                obs.chunk(p, 0),
            )
        assert obs.finish(End.EOF, 1.0).outcome == "complete"
    return rounds * (tokens + 3) / (time.process_time() - t0)


def client_skew(url: str, streams: int, tokens: int, transport: str = "lean") -> dict:
    th = Thresholds(stall_timeout_s=30)
    records = []
    t0 = time.monotonic()
    cpu0 = time.process_time()
    with make_client(30, streams + 10, transport=transport) as client:
        pool = gevent.pool.Pool(streams)
        for i in range(streams):
            payload = chat_payload(None, f"skew {i}", tokens, ignore_eos=True)
            pool.spawn(stream_request, client, url, payload, th, on_record=records.append)
            gevent.sleep(1.0 / streams)  # arrivals spread over a second
        pool.join()
    wall = time.monotonic() - t0
    cpu = time.process_time() - cpu0
    p99s = [r.skew_p99_s for r in records if r.skew_p99_s is not None]
    p50s = [r.skew_p50_s for r in records if r.skew_p50_s is not None]
    events = sum(r.events for r in records)
    return {
        "streams": streams,
        "complete": sum(r.outcome == "complete" for r in records),
        "skew_p50_ms": 1000 * percentile(p50s, 50),
        "skew_p99_ms": 1000 * percentile(p99s, 99),
        "events_per_s": events / wall,
        "cpu_us_per_event": 1e6 * cpu / max(events, 1),
    }


def main() -> None:
    # side by side, alternating, best of three each (a noisy machine's slow windows)
    on, off = [], []
    for _ in range(3):
        on.append(parser_throughput())
        off.append(parser_throughput(shortcut=False))
    print(
        f"parser + classifier: {max(on):,.0f} events/s on one core, "
        f"{max(off):,.0f} parsing every chunk ({max(on) / max(off):.2f}x)"
    )
    settings = SimSettings(
        port=free_port(), ttft_s=0.01, itl_s=0.02, max_num_seqs=4096, send_timestamps=True
    )
    with running_sim(settings) as base:
        # the two readers side by side, alternating, on the same simulator
        print(
            f"{'reader':>7} {'streams':>8} {'complete':>9} {'skew p50 ms':>12} "
            f"{'skew p99 ms':>12} {'events/s':>9} {'CPU us/event':>13}"
        )
        for n in (50, 300):
            for transport in ("httpx", "lean"):
                r = client_skew(base + "/v1/chat/completions", n, 250, transport)
                print(
                    f"{transport:>7} {r['streams']:>8} {r['complete']:>9} "
                    f"{r['skew_p50_ms']:>12.2f} {r['skew_p99_ms']:>12.2f} "
                    f"{r['events_per_s']:>9.0f} {r['cpu_us_per_event']:>13.1f}"
                )


if __name__ == "__main__":
    main()
