"""Run the simulator: startup delay, then uvicorn with vLLM-like signal handling."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import sys

import uvicorn

from harness.sim.app import SimApp
from harness.sim.settings import SimSettings


class _Server(uvicorn.Server):
    # uvicorn's own handler would stop accepting connections at SIGTERM; vLLM keeps
    # accepting while it drains, so the engine decides when the server exits.
    @contextlib.contextmanager
    def capture_signals(self):
        yield


async def serve(settings: SimSettings) -> None:
    loop = asyncio.get_running_loop()
    app = SimApp(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_keep_alive=75,
        # No proxy in front to trust, and one coroutine less to resume on every token.
        proxy_headers=False,
        timeout_graceful_shutdown=2,
    )
    server = _Server(config)

    def exit_now() -> None:
        # Every stream has ended: skip uvicorn's wait for idle connections, which
        # would delay the exit that the local target measures against the grace period.
        server.should_exit = server.force_exit = True

    app.engine.on_exit = exit_now

    def close_listener() -> None:
        for listener in getattr(server, "servers", []):
            listener.close()  # new connections are refused; open ones carry on

    app.engine.on_close_listener = close_listener
    stop_startup = asyncio.Event()

    def on_signal(sig: signal.Signals) -> None:
        # One line, as an engine logs its shutdown: on a node it is the container log's
        # evidence of when the signal came (the kubelet stamps each line).
        drain = settings.shutdown_timeout_s
        print(f"rollcheck sim: {sig.name} received, drain {drain:g} s", file=sys.stderr, flush=True)
        stop_startup.set()
        app.engine.begin_shutdown()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a closed terminal too
        loop.add_signal_handler(sig, on_signal, sig)

    if settings.startup_s > 0:
        if settings.startup_health_503:
            app.engine.ready = False
            task = asyncio.ensure_future(server.serve())
            await _sleep_unless(stop_startup, settings.startup_s)
            app.engine.ready = True
            await task
            return
        # vLLM does not listen until the engine is built: connections are refused.
        if await _sleep_unless(stop_startup, settings.startup_s):
            return
    app.engine.ready = True
    await server.serve()


async def _sleep_unless(event: asyncio.Event, seconds: float) -> bool:
    """Sleep; True if the event fired first."""
    try:
        await asyncio.wait_for(event.wait(), seconds)
        return True
    except TimeoutError:
        return False


def run(settings: SimSettings) -> int:
    # Thousands of short-lived chunk dicts a second trigger frequent young-generation
    # collections; a larger threshold keeps GC pauses out of the token schedule.
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        asyncio.run(serve(settings))
    except OSError as exc:
        print(
            f"rollcheck sim: cannot listen on {settings.host}:{settings.port}: {exc.strerror}"
            "; pick another --port",
            file=sys.stderr,
        )
        return 1
    return 0
