"""One streaming HTTP request -> one StreamRecord, whatever happens.

The read timeout equals the stall timeout, and a stream that only sends
keep-alive comments is given up on too. No exception escapes: every failure
becomes an outcome. A BaseException that ends the caller (a Locust user being
stopped, Ctrl-C) still yields a `cancelled` record through `on_record` before
it propagates, so nothing is lost.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import httpx

from harness.streams import End, StreamObserver, StreamRecord, Thresholds

CONNECT_TIMEOUT_S = 10.0
# the response header a gateway may name the serving pod's address in (rollcheck's own
# nginx does): the live view of which pod holds which stream
UPSTREAM_HEADER = "X-Rollcheck-Upstream"


def new_request_id() -> str:
    return uuid.uuid4().hex


def make_client(stall_timeout_s: float, max_connections: int = 1000, **settings) -> httpx.Client:
    """settings: more httpx.Client arguments (verify, cert, headers) for a pod reached
    through the Kubernetes API server."""
    return httpx.Client(
        timeout=httpx.Timeout(stall_timeout_s, connect=min(CONNECT_TIMEOUT_S, stall_timeout_s)),
        limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=100),
        **settings,
    )


def chat_payload(
    model: str | None, prompt: str, max_tokens: int | None, ignore_eos: bool = False, **extra
) -> dict:
    payload: dict = {
        "messages": [{"role": "user", "content": prompt}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if model:
        payload["model"] = model
    if max_tokens is not None:
        payload["max_tokens"] = max_tokens
    if ignore_eos:
        payload["ignore_eos"] = True
    payload.update(extra)
    return payload


def stream_request(
    client: httpx.Client,
    url: str,
    payload: dict,
    thresholds: Thresholds,
    *,
    request_id: str | None = None,
    headers: dict | None = None,
    on_record: Callable[[StreamRecord], None] | None = None,
    on_headers: Callable[[], None] | None = None,
    on_start: Callable[[StreamObserver], None] | None = None,
    keep_text: bool = False,
) -> StreamRecord:
    """POST payload to url and read the event stream to its end (keep_text: with the
    answer's content pieces in record.pieces; on_start: given the stream's observer
    before it is sent, for a live view of its progress)."""
    request_id = request_id or new_request_id()
    hdrs = {"X-Request-Id": request_id, "Accept": "text/event-stream"}
    hdrs.update(headers or {})
    sent_at = time.time()
    t0 = time.monotonic()
    obs = StreamObserver(request_id, sent_at, thresholds, keep_text=keep_text)
    if on_start is not None:
        on_start(obs)
    record: StreamRecord | None = None
    try:
        record = _exchange(client, url, payload, hdrs, obs, t0, thresholds, on_headers)
    except BaseException:
        record = obs.finish(End.CANCELLED, time.monotonic() - t0, "cancelled by the harness")
        raise
    finally:
        if on_record is not None and record is not None:
            on_record(record)
    return record


def _exchange(client, url, payload, hdrs, obs, t0, thresholds, on_headers) -> StreamRecord:
    def now() -> float:
        return time.monotonic() - t0

    try:
        with client.stream("POST", url, json=payload, headers=hdrs) as response:
            obs.headers(response.status_code, response.headers.get("content-type"), now())
            obs.upstream = response.headers.get(UPSTREAM_HEADER)
            if on_headers is not None:
                on_headers()
            for chunk in response.iter_raw():
                obs.chunk(chunk, now())
                if obs.since_data_s(now()) > thresholds.stall_timeout_s:
                    # Only comments for too long: a keep-alive is not progress.
                    return obs.finish(End.STALL, now(), "only keep-alive comments")
        return obs.finish(End.EOF, now())
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol) as exc:
        return obs.finish(End.CONNECT, now(), _describe(exc))
    except (httpx.ReadTimeout, httpx.PoolTimeout, httpx.WriteTimeout) as exc:
        return obs.finish(End.STALL, now(), _describe(exc))
    except httpx.RemoteProtocolError as exc:
        end = End.CONNECT if obs.status is None else End.RESET
        return obs.finish(end, now(), _describe(exc))
    except (httpx.HTTPError, OSError) as exc:
        end = End.CONNECT if obs.status is None else End.RESET
        return obs.finish(end, now(), _describe(exc))
    except Exception as exc:  # a bug in the harness must still leave a record
        end = End.CONNECT if obs.status is None else End.RESET
        return obs.finish(end, now(), f"client error: {_describe(exc)}")


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]
