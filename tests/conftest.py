"""Fixtures for the project's own tests: real simulator processes on loopback."""

from __future__ import annotations

import signal

import pytest

from harness.proc import free_port, start_sim, stop_group, wait_http
from harness.sim.settings import SimSettings


class RunningSim:
    def __init__(self, settings: SimSettings, proc):
        self.settings, self.proc = settings, proc
        self.url = f"http://{settings.host}:{settings.port}"

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def exited_within(self, seconds: float) -> bool:
        try:
            self.proc.wait(seconds)
            return True
        except Exception:
            return False


@pytest.fixture
def sim_factory():
    started: list[RunningSim] = []

    def start(wait: bool = True, **kw) -> RunningSim:
        settings = SimSettings(port=free_port(), **kw)
        sim = RunningSim(settings, start_sim(settings))
        started.append(sim)
        if wait:
            wait_http(sim.url + "/health", proc=sim.proc)
        return sim

    yield start
    for sim in started:
        stop_group(sim.proc, signal.SIGKILL)
