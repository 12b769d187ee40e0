"""The project's own tests: their tiers, and real simulator processes on loopback.

Every test belongs to exactly one tier, a marker: `pytest tests -m unit` runs the
functional core alone in seconds. A module names its tier with `pytestmark`; a module
that mixes tiers marks each test; tests/kube, tests/conformance and tests/e2e are kube,
engine and e2e by their folder. A unit test that starts a process fails.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from harness.proc import free_port, start_sim, stop_group, wait_http
from harness.sim.settings import SimSettings

TIERS = {
    "unit": "no processes, loopback sockets at most; the whole tier runs in seconds",
    "process": "real processes: simulators, nginx, Locust, the rollcheck command",
    "browser": "headless Chromium draws a page",
    "kube": "the embedded Kubernetes control plane (rollcheck kube-local)",
    "engine": "real vLLM, the CPU build (scripts/build-vllm)",
    "e2e": "scenarios run as a user runs them, verdicts read back",
}
FOLDER_TIERS = {"kube": "kube", "conformance": "engine", "e2e": "e2e"}


def pytest_configure(config):
    for name, what in TIERS.items():
        config.addinivalue_line("markers", f"{name}: tier: {what}")
    config.addinivalue_line(
        "markers",
        "alone: compares timings of runs made minutes apart, or loads a core on purpose, "
        "so scripts/run test runs it with the engine tier, beside no other test",
    )


def pytest_collection_modifyitems(config, items):
    """Give each test its folder's tier, and refuse a test with none or two."""
    for item in items:
        folder = Path(str(item.fspath)).parent.name
        if folder in FOLDER_TIERS and not item.get_closest_marker(FOLDER_TIERS[folder]):
            item.add_marker(FOLDER_TIERS[folder])
        tiers = sorted({m.name for m in item.iter_markers() if m.name in TIERS})
        if len(tiers) != 1:
            raise pytest.UsageError(
                f"{item.nodeid}: {'tiers ' + ', '.join(tiers) if tiers else 'no tier'}; "
                f"mark it with exactly one of {', '.join(TIERS)} (tests/conftest.py)"
            )


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request, monkeypatch):
    if request.node.get_closest_marker("unit"):

        def refuse(*args, **kwargs):
            raise AssertionError(f"a unit test started a process ({args[1:2]}): mark it process")

        monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


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
        settings = SimSettings(**({"port": free_port()} | kw))
        sim = RunningSim(settings, start_sim(settings))
        started.append(sim)
        if wait:
            wait_http(sim.url + "/health", proc=sim.proc)
        return sim

    yield start
    for sim in started:
        stop_group(sim.proc, signal.SIGKILL)
