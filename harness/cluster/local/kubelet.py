"""PodRunner: the kubelet's contract for one pod whose container is a local process.

Probes as the kubelet runs them (startup gates readiness and liveness; readiness
only removes the pod from endpoints; liveness restarts the container); a
container that exits is restarted after a backoff (restartPolicy: Always); and
deletion runs preStop, then SIGTERM, then SIGKILL at terminationGracePeriodSeconds
counted from the start of the deletion (each restart waiting twice as long as the one
before: CrashLoopBackOff). A pod whose node loses power freezes where it
stands and its kubelet falls silent (lose_node) until the node is back (node_back), when
its container is found dead and restarted, or the pod's deletion completed. The local
target uses it (kube-local runs real kubelets; docs/facts.md lists where the real kubelet
differs).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from harness.client import http_get
from harness.cluster.local.silence import fill_accept_queue, release
from harness.config.schema import PodSettings, Probe
from harness.engines.startup import StartGate
from harness.files import open_append
from harness.proc import kill_group

TICK_S = 0.02
MAX_BACK_OFF_S = 300.0  # the kubelet's longest wait before restarting a container
PR_SET_PDEATHSIG = 1


try:
    _LIBC = ctypes.CDLL("libc.so.6", use_errno=True)  # loaded before any fork
except OSError:
    _LIBC = None


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """preexec_fn: if the thread that started the child dies (the harness was killed),
    the child gets `sig` (SIGKILL) instead of living on as an orphan (Linux)."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, sig)


def stop_with_parent() -> None:
    """preexec_fn for a master that forks workers (nginx): SIGTERM when the harness dies,
    so that the master ends its workers as it exits. A SIGKILLed master leaves them
    running, holding its listening socket (they are its children, not the harness's)."""
    die_with_parent(signal.SIGTERM)


@dataclass
class PodSpec:
    name: str
    version: str
    node: str
    ip: str
    port: int
    command: list[str]
    settings: PodSettings
    env: dict | None = None

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"


class PodRunner(threading.Thread):
    """Runs one pod until it is deleted; reports through `emit(kind, **detail)`."""

    def __init__(
        self,
        spec: PodSpec,
        emit: Callable[..., None],
        log_dir: Path,
        on_change: Callable[[], None] = lambda: None,
        start_gate: StartGate | None = None,
    ):
        super().__init__(name=f"pod-{spec.name}", daemon=True)
        self.spec = spec
        self._emit = emit
        self.on_change = on_change
        self.log_dir = log_dir
        self.created_at = time.time()
        self.phase = "Pending"
        self.started = False
        self.ready = False
        self.ready_since: float | None = None
        self.restarts = 0
        self.deletion_cost = 0  # controller.kubernetes.io/pod-deletion-cost
        self.exit_code: int | None = None
        self.terminating = False
        self.deletion_started: float | None = None
        self._grace_s = spec.settings.termination_grace_s
        self._deletion = threading.Event()
        self.proc: subprocess.Popen | None = None
        self._exited_at: float | None = None  # when a SIGKILL was seen to end the process
        self.done = threading.Event()
        # real engines on a busy machine start a few at a time (StartGate): the container
        # waits for a slot, and holds it until it has started (or exited)
        self._gate = start_gate
        self._holding_gate = False
        # node_loss: the node is off (the kubelet silent, the container frozen) until back
        self.lost = False
        self._life = threading.Lock()  # lose_node against a container being started
        self._back = threading.Event()
        self._held: list = []  # the connections that keep the frozen port silent

    # --- requests from the control plane -----------------------------------
    def delete(self, grace_s: float | None = None) -> None:
        if self.terminating:
            return
        if grace_s is not None:
            self._grace_s = grace_s
        self.terminating = True
        self.deletion_started = time.time()
        # The grace period runs from the deletion, not from when this pod's thread
        # next looks (as the Kubernetes target stamps it: the deletionTimestamp).
        self.emit("terminating", grace_s=self._grace_s)
        self._set_ready(False, "deleted", by_control_plane=True)
        self._deletion.set()

    def signal(self, sig: int) -> None:
        """Signal the container's main process (pod kill: the kubelet then restarts it).
        A SIGKILL is waited for (it cannot be caught), so the exit is stamped when the
        process died, not on the supervisor's next look."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            self.emit("signal", signal=signal.Signals(sig).name)
            proc.send_signal(sig)
            if sig == signal.SIGKILL:
                try:
                    proc.wait(timeout=5)
                    self._exited_at = time.time()
                except subprocess.TimeoutExpired:
                    pass

    def lose_node(self) -> None:
        """Its node lost power: the container freezes where it stands (SIGSTOP to its
        process group), its port answers no new connection (silence.fill_accept_queue),
        and the kubelet neither probes nor reports until node_back(). A deletion
        meanwhile is the API server's alone: the pod shows terminating, nothing runs."""
        with self._life:
            if self.lost:
                return
            self.lost = True
            self._back.clear()
            proc = self.proc
            if proc is not None and proc.poll() is None:
                kill_group(proc, signal.SIGSTOP)
                self._held = fill_accept_queue(self.spec.ip, self.spec.port)

    def node_back(self) -> None:
        """The node is back from its power loss: what ran on it is gone (the frozen
        container is SIGKILLed; its connections reset), and the kubelet, heard again,
        restarts the container, or completes the pod's deletion."""
        with self._life:
            if not self.lost:
                return
            proc = self.proc
            if proc is not None and proc.poll() is None:
                kill_group(proc, signal.SIGKILL)  # a stopped process dies of it too
                proc.wait()
            release(self._held)
            self.lost = False
            self._back.set()

    def mark_not_ready(self, reason: str) -> None:
        """The node lifecycle controller's mark on a pod of a node it stopped hearing
        from (its Ready condition False): out of the endpoints."""
        self._set_ready(False, reason, by_control_plane=True)

    # --- the pod's life ----------------------------------------------------
    def emit(self, kind: str, **detail) -> None:
        self._emit(
            kind, pod=self.spec.name, node=self.spec.node, version=self.spec.version, **detail
        )

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.spec.name}.log"

    def run(self) -> None:
        try:
            while not self._deletion.is_set():
                if not self._take_gate():
                    break
                if not self._start_container():  # its node is lost: nothing runs
                    self._release_gate()
                    self._back.wait()
                    continue
                reason = self._supervise()
                self._release_gate()
                if reason == "deleted":
                    break
                self._set_ready(False, reason)
                self.started = False
                self.restarts += 1
                # CrashLoopBackOff: the wait doubles with each restart, up to the kubelet's 300 s
                delay = min(
                    self.spec.settings.restart_backoff_s * 2 ** (self.restarts - 1),
                    MAX_BACK_OFF_S,
                )
                self.emit("back_off", delay_s=delay, restarts=self.restarts)
                if self._deletion.wait(delay):
                    break
            self._terminate()
        finally:
            self._release_gate()
            self.phase = "Terminated"
            self.done.set()
            self.on_change()

    def _take_gate(self) -> bool:
        """Wait for a start slot (False: the pod was deleted while it waited)."""
        if self._gate is None:
            return True
        if not self._gate.try_acquire():
            self.emit("waiting_to_start", slots=self._gate.slots)
            if not self._gate.acquire(cancelled=self._deletion.is_set):
                return False
        self._holding_gate = True
        return True

    def _release_gate(self) -> None:
        if self._holding_gate:
            self._holding_gate = False
            self._gate.release()

    def _start_container(self) -> bool:
        """Start the container (False: not while its node is lost)."""
        with self._life:
            if self.lost:
                return False
            log = open_append(self.log_path, binary=True)
            env = dict(os.environ, **(self.spec.env or {}))
            self.proc = subprocess.Popen(
                self.spec.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
            log.close()
        self.phase = "Running"
        self.emit("container_started", pid=self.proc.pid, address=self.spec.address)
        return True

    def _supervise(self) -> str:
        """Probe until the container exits or the pod is deleted; return why it ended."""
        s = self.spec.settings
        now = time.monotonic()
        probes: dict[str, list] = {}  # name -> [probe, next_at, failures]
        if s.startup_probe is not None:
            probes["startup"] = [s.startup_probe, now + s.startup_probe.initial_delay_s, 0]
        else:
            self._mark_started()
            self._arm_after_startup(probes, now)
        while True:
            if self.lost:
                return self._silent()
            if self._deletion.wait(TICK_S):
                return "deleted"
            if s.memory_limit_mb is not None and _rss_mb(self.proc.pid) > s.memory_limit_mb:
                # the kernel's OOM killer at the cgroup's limit: SIGKILL, reported as such
                _killpg(self.proc, signal.SIGKILL)
                self.proc.wait()
                self.exit_code = 137
                self.emit(
                    "exited",
                    code=137,
                    reason="OOMKilled",
                    limit_mb=s.memory_limit_mb,
                    restarts=self.restarts,
                )
                return "OOMKilled"
            code = self.proc.poll()
            if code is not None:
                self.exit_code = code
                at, self._exited_at = self._exited_at, None
                self.emit("exited", code=code, t=at)
                return "exited"
            now = time.monotonic()
            for name, entry in list(probes.items()):
                probe, next_at, failures = entry
                if now < next_at:
                    continue
                ok = self._probe(probe)
                if self.lost:  # the node went while it probed: nobody hears the result
                    return self._silent()
                entry[1] = time.monotonic() + probe.period_s
                entry[2] = 0 if ok else failures + 1
                if name == "startup":
                    if ok:
                        del probes["startup"]
                        self._mark_started()
                        self._arm_after_startup(probes, time.monotonic())
                    elif entry[2] >= probe.failure_threshold:
                        self.emit("probe_failed", probe="startup", failures=entry[2])
                        self._kill_container("startup probe failed")
                        return "startup probe failed"
                elif name == "readiness":
                    if ok:
                        self._set_ready(True, "readiness probe succeeded")
                    elif entry[2] >= probe.failure_threshold:
                        self._set_ready(False, "readiness probe failed")
                elif name == "liveness" and not ok and entry[2] >= probe.failure_threshold:
                    self.emit("probe_failed", probe="liveness", failures=entry[2])
                    self._set_ready(False, "liveness probe failed")
                    self._stop_container(time.time() + self._grace_s)
                    return "liveness probe failed"

    def _silent(self) -> str:
        """While the node is lost: no probe, no report. Once it is back the container is
        dead (node_back killed it); "deleted" when the pod was deleted meanwhile."""
        self._back.wait()
        code = self.proc.returncode
        self.exit_code = code
        self.emit("exited", code=code, reason="node lost")
        return "deleted" if self._deletion.is_set() else "node lost"

    def _arm_after_startup(self, probes: dict, now: float) -> None:
        s = self.spec.settings
        probes["readiness"] = [s.readiness_probe, now + s.readiness_probe.initial_delay_s, 0]
        if s.liveness_probe is not None:
            probes["liveness"] = [s.liveness_probe, now + s.liveness_probe.initial_delay_s, 0]

    def _mark_started(self) -> None:
        self.started = True
        self._release_gate()
        self.emit("started")

    def _probe(self, probe: Probe) -> bool:
        try:
            r = http_get(f"http://{self.spec.address}{probe.path}", timeout=probe.timeout_s)
            return 200 <= r.status_code < 400
        except httpx.HTTPError:
            return False

    def _set_ready(self, ready: bool, reason: str, by_control_plane: bool = False) -> None:
        if ready and self.terminating:
            return
        if self.lost and not by_control_plane:
            return  # the kubelet is silent: what its probes saw reaches nobody
        if ready != self.ready:
            self.ready = ready
            self.ready_since = time.time() if ready else None
            self.emit("ready" if ready else "unready", reason=reason)
            self.on_change()

    def _kill_container(self, reason: str) -> None:
        if self.proc and self.proc.poll() is None:
            self.emit("sigkill", reason=reason)
            _killpg(self.proc, signal.SIGKILL)
            self.proc.wait()
            self.emit("exited", code=self.proc.returncode)

    def _stop_container(self, deadline: float) -> None:
        """preStop, SIGTERM, then SIGKILL at the deadline."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        prestop = self.spec.settings.prestop_s
        if prestop > 0 and time.time() < deadline:
            self.emit("prestop_started", sleep_s=prestop)
            # The hook may not outlive the grace period.
            time.sleep(max(0.0, min(prestop, deadline - time.time())))
        if proc.poll() is None and time.time() < deadline:
            self.emit("sigterm")
            proc.send_signal(signal.SIGTERM)
        while proc.poll() is None and time.time() < deadline:
            time.sleep(TICK_S)
        if proc.poll() is None:
            self.emit("sigkill", reason="grace period over")
            _killpg(proc, signal.SIGKILL)
        proc.wait()
        _killpg(proc, signal.SIGKILL)  # what the engine left (a container's end takes all)
        self.exit_code = proc.returncode
        self.emit("exited", code=proc.returncode)

    def _terminate(self) -> None:
        self.phase = "Terminating"
        self._stop_container(self.deletion_started + self._grace_s)


def _rss_mb(pid: int) -> float:
    """A process's resident memory in MiB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0


PAGE = os.sysconf("SC_PAGE_SIZE")


def _killpg(proc: subprocess.Popen, sig: int) -> None:
    kill_group(proc, sig)
