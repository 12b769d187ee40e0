"""Waiting for a real engine to start by its log, and starting engines a few at a time."""

from __future__ import annotations

import threading
import time

import pytest

from harness.engines.startup import StartGate, StartupFailed, wait_started

pytestmark = pytest.mark.unit


def test_a_start_that_keeps_logging_is_waited_for_past_the_stall_bound(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("loading weights\n")
    stop = threading.Event()

    def engine():  # logs every 20 ms for 0.4 s: eight stall bounds of 50 ms
        with open(log, "a") as f:
            for i in range(20):
                f.write(f"compiling {i}\n")
                f.flush()
                time.sleep(0.02)
        stop.set()

    threading.Thread(target=engine, daemon=True).start()
    took = wait_started(stop.is_set, log, "vllm", stall_s=0.05, ceiling_s=10)
    assert took >= 0.3


def test_a_silent_start_fails_quoting_its_log_and_the_machine(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("INFO loading weights\nINFO Warming up model for the compilation...\n")
    with pytest.raises(StartupFailed) as e:
        wait_started(lambda: False, log, "vllm on port 1234", stall_s=0.1, ceiling_s=10)
    text = str(e.value)
    assert text.startswith("vllm on port 1234: timed out after")
    assert "without progress" in text and "load average" in text
    assert "Warming up model for the compilation" in text  # the log's last lines


def test_an_engine_that_exits_ends_the_wait_at_once(tmp_path):
    def exited():
        raise StartupFailed("vllm exited while starting (1)")

    t0 = time.monotonic()
    with pytest.raises(StartupFailed, match="exited"):
        wait_started(lambda: False, tmp_path / "none.log", "vllm", alive=exited, stall_s=30)
    assert time.monotonic() - t0 < 1


def test_a_gate_of_one_slot_starts_engines_one_after_the_other():
    gate = StartGate(0)  # no free core still gives one slot
    assert gate.slots == 1 and gate.try_acquire()
    assert not gate.try_acquire()
    waiting = threading.Thread(target=gate.acquire, daemon=True)
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive()  # the second start waits for the first
    gate.release()
    waiting.join(2)
    assert not waiting.is_alive()
    assert not gate.acquire(cancelled=lambda: True)  # a pod deleted while it waited
