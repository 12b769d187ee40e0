"""The scenario's witnesses beside the load: the engines' own counts through the run
(harness.engine_counts, from each pod's /metrics) and, where a scenario asks, a pod's
/health through a drain. Each is a background thread of its own, stopped and joined
however the scenario ends: a thread left running at interpreter exit aborted a
SIGTERMed run with status 134."""

from __future__ import annotations

import threading
import time

from harness.engine_counts import EngineCounts

HEALTH_JOIN_S = 15.0  # one /health request through the API's pods proxy, and its retries


class Witnesses:
    def __init__(self, target, engine_poll_s: float):
        self.target = target
        self.engine_poll_s = engine_poll_s
        self.engine_counts: EngineCounts | None = None
        self._health_stop = threading.Event()
        self._health_thread: threading.Thread | None = None
        self._counts_stop = threading.Event()
        self._counts_thread: threading.Thread | None = None

    def start_engine_counts(self) -> None:
        """The engines' own counts through the run, from now (none where
        scenario.engine_poll_s is 0)."""
        period = self.engine_poll_s
        if period <= 0:
            return
        counts = self.engine_counts = EngineCounts(time.time())
        stop = self._counts_stop

        def poll_once() -> None:
            t, running, waiting = time.time(), 0.0, 0.0
            for pod in self.target.pods():
                if not pod.address:
                    continue
                try:
                    m = self.target.pod_metrics(pod.name)
                except Exception:  # a pod going away mid-read: its next read, or none
                    continue
                if m:
                    counts.sample(t, pod.name, pod.created_at, m)
                    running += m.get("vllm:num_requests_running", 0.0)
                    waiting += m.get("vllm:num_requests_waiting", 0.0)
            counts.sample_gauges(t, running, waiting)

        def poll() -> None:
            while not stop.is_set():
                poll_once()
                stop.wait(period)
            poll_once()  # after the load stopped: the cancels at the end, counted

        self._counts_thread = threading.Thread(target=poll, name="engine-witness", daemon=True)
        self._counts_thread.start()

    def stop_engine_counts(self) -> EngineCounts | None:
        """The counts, once their last reading (after the load stopped) is in."""
        self._counts_stop.set()
        if self._counts_thread is not None:
            self._counts_thread.join(30)
        return self.engine_counts

    def record_health(self, pod: str, period_s: float = 0.2) -> None:
        """Poll the pod's /health in the background, each answer a `health_probe` action
        on the timeline, until the pod is gone or the health witness is stopped."""

        def poll() -> None:
            while not self._health_stop.wait(period_s):
                status = self.target.pod_health(pod)
                if status is None and not any(p.name == pod for p in self.target.pods()):
                    return
                self.target.action("health_probe", pod=pod, status=status)

        self._health_thread = threading.Thread(target=poll, daemon=True, name="health")
        self._health_thread.start()

    def stop_health(self) -> None:
        """Joined, not left running: a daemon thread still in a request (or logging a
        retry) at interpreter exit can abort the process after its last line."""
        self._health_stop.set()
        if self._health_thread is not None:
            self._health_thread.join(HEALTH_JOIN_S)

    def close(self) -> None:
        self._health_stop.set()
        self._counts_stop.set()
        for thread in (self._health_thread, self._counts_thread):
            if thread is not None:
                thread.join(HEALTH_JOIN_S)
