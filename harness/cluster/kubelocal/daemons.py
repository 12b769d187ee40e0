"""kube-local's daemons on this machine (the control plane's, the scalers'): each in its
own process group with its own log, remembered for the reaper, waited on until ready
(or until one exits, named with its log's last line), stopped in reverse order."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx

from harness.cluster.local.kubelet import die_with_parent
from harness.files import open_append
from harness.proc import PidFile, stop_group
from harness.waits import wait_until


def built(script: Path, env_override: str, error: Callable[[str], Exception]) -> Path:
    """The folder a cached build script prints last (building on first use), or the one
    the environment variable `env_override` names; `error(line)` when the build fails,
    with its last line of output."""
    given = os.environ.get(env_override)
    if given:
        return Path(given)
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise error(f"bash {script}: {last}")
    return Path(r.stdout.strip().splitlines()[-1])


def spawn_logged(log_path: Path, cmd: list[str], env: dict | None = None) -> subprocess.Popen:
    """A daemon of kube-local: its own process group, its output in a log file started
    afresh, and SIGKILL if the thread that started it dies (the harness was killed)."""
    log = open_append(log_path, binary=True, truncate=True)
    try:
        return subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    finally:
        log.close()


class Daemons:
    """Named processes logging to `<folder>/<name>.log`; failures raise `error(line)`."""

    def __init__(self, folder: Path, kind: str, error: Callable[[str], Exception]):
        self.folder = Path(folder)
        self.error = error
        self.procs: dict[str, subprocess.Popen] = {}
        self.pidfile = PidFile(kind)

    def spawn(self, name: str, cmd: list[str], env: dict | None = None) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        proc = self.procs[name] = spawn_logged(self.folder / f"{name}.log", cmd, env)
        self.pidfile.remember(name, proc.pid)

    def wait(self, ready: Callable[[], bool], name: str, timeout_s: float) -> None:
        """Until `ready()` (an HTTP error counts as not yet), failing at once when any of
        these daemons exits."""

        def none_exited() -> None:
            for pname, proc in self.procs.items():
                if proc.poll() is not None:
                    raise self.error(
                        f"{pname} exited with code {proc.returncode}: {self.tail(pname)}"
                    )

        def is_ready() -> bool:
            try:
                return ready()
            except httpx.HTTPError:
                return False

        wait_until(
            is_ready,
            timeout_s,
            f"{name} to be ready",
            interval_s=0.1,
            error=lambda msg: self.error(f"{msg}: {self.tail(name)}"),
            alive=none_exited,
        )

    def tail(self, name: str) -> str:
        try:
            text = (self.folder / f"{name}.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        lines = text.strip().splitlines()
        return lines[-1][:300] if lines else "(empty log)"

    def alive(self) -> dict[str, bool]:
        return {n: p.poll() is None for n, p in self.procs.items()}

    def stop(self, wait_s: float = 5) -> None:
        for name in reversed(list(self.procs)):
            stop_group(self.procs[name], signal.SIGTERM, wait_s)
        self.procs.clear()
        self.pidfile.clear()
