"""LoadRun: Locust, headless, as child processes; every request accounted for.

A master (or one local process) plus N local workers, all in their own process
groups so nothing outlives the run. Live counts come from the master's status
file; stop() drains the users, waits for every record and checks that requests
sent = records written = outcomes counted.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import httpx

import loadgen
from harness.client import http_get, http_post
from harness.config import ConfigError
from harness.config.load import LoadSettings, ModelShare, Share, check_models, web_ui_address
from harness.errors import RollcheckError
from harness.files import check_writable, open_append, write_atomic
from harness.load_sizing import TARGET_CPU, Sizing, size
from harness.load_status import FILE as STATUS_FILE
from harness.load_status import LoadStatus
from harness.proc import free_port, kill_group
from harness.streams import StreamRecord, Thresholds, read_jsonl
from harness.waits import hold, wait_until

LOCUSTFILE = Path(loadgen.__file__).parent / "locustfile.py"


# the load reads back the records it wrote itself: only the report's bound is tighter
OWN_RECORDS_LIMIT = 16 << 30


class LoadError(RollcheckError, RuntimeError):
    """The load could not run or lost requests: the message is one clear line."""


@dataclass
class LoadResult:
    records: list[StreamRecord]
    sent: int
    status: LoadStatus
    problems: list[str] = field(default_factory=list)

    @property
    def outcome_total(self) -> int:
        """The outcomes the workers counted (LoadStatus.outcome_total)."""
        return self.status.outcome_total

    def accounting_ok(self) -> bool:
        return not self.problems

    def raise_for_accounting(self) -> None:
        if self.problems:
            raise LoadError("; ".join(self.problems))


def check_web_ui_free(value: str) -> None:
    """load.web_ui's address can be listened on (before the load starts, in one line)."""
    host, port = web_ui_address(value)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise LoadError(
            f"load.web_ui {value}: cannot resolve {host} ({exc}); give an address and a port"
        ) from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Locust's server does
        try:
            sock.bind(address)
        except OSError as exc:
            raise LoadError(
                f"load.web_ui {value}: cannot listen there ({exc.strerror or exc}); "
                "give load.web_ui a free port"
            ) from None


class LoadRun:
    def __init__(
        self,
        url: str,
        run_dir: Path,
        settings: LoadSettings,
        thresholds: Thresholds,
        start_timeout_s: float | None = None,
    ):
        try:
            settings.validate()
        except ValueError as exc:
            raise ConfigError(f"load: {exc}") from None
        self.sizing: Sizing | None = None
        if settings.workers == "auto":  # (a scenario's were sized for its engine already)
            self.sizing = size(settings, None, "", local_target=False, measure=measure_budget)
            settings = replace(settings, workers=self.sizing.workers)
        self.url = url.rstrip("/")
        self.run_dir = Path(run_dir)
        self.settings = settings
        self.thresholds = thresholds
        self.start_timeout_s = (
            settings.start_timeout_s if start_timeout_s is None else start_timeout_s
        )
        self.load_dir = self.run_dir / "load"
        self.master: subprocess.Popen | None = None
        self.master_address: str | None = None  # host:port workers connect to
        self.workers: list[subprocess.Popen] = []
        self._logs: list = []
        self.result: LoadResult | None = None
        self._models_seq = 0  # set_models' changes so far

    # --- lifecycle ---------------------------------------------------------
    def preflight(self) -> None:
        """Fail fast, in one line, on a target that cannot serve the load at all."""
        from loadgen.settings import auth_headers

        check_writable(self.run_dir)  # before the first request, not after the last
        target = self.url + self.settings.path
        try:
            headers = auth_headers(self.settings.api_key_env)
        except ValueError as exc:
            raise LoadError(str(exc)) from None
        try:
            r = http_post(target, json={"messages": []}, headers=headers, timeout=5.0)
        except httpx.HTTPError as exc:
            raise LoadError(
                f"target {self.url} is unreachable ({type(exc).__name__}); "
                "check the URL and that the server is up"
            ) from None
        if r.status_code in (401, 403):
            how = (
                f"the key in ${self.settings.api_key_env} was refused"
                if self.settings.api_key_env
                else "set load.api_key_env (rollcheck load --api-key ENV) to the variable "
                "holding the key"
            )
            raise LoadError(f"target answers {r.status_code} for {self.settings.path}: {how}")
        if r.status_code in (404, 405):
            raise LoadError(
                f"target answers {r.status_code} for {self.settings.path}; "
                "check load.path and the base URL (it should not include /v1/...)"
            )
        self._check_context(headers)
        if self.settings.web_ui:
            check_web_ui_free(self.settings.web_ui)

    def _check_context(self, headers: dict) -> None:
        """The answers asked for fit the model's context (max_model_len, which vLLM reports
        in /v1/models): one that does not is refused with a 400 on every request."""
        try:
            r = http_get(self.url + "/v1/models", headers=headers, timeout=5.0)
            cards = r.json().get("data") if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return
        if not isinstance(cards, list) or not cards:
            return
        s = self.settings
        card = next((c for c in cards if isinstance(c, dict) and c.get("id") == s.model), None)
        card = card or (cards[0] if isinstance(cards[0], dict) else {})
        limit = card.get("max_model_len")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
            return
        prompt = max(p.tokens for p in s.prompt_tokens)
        asked = [("load.max_tokens", max(m.tokens for m in s.max_tokens))]
        if s.long_answer_user:
            asked.append(("load.long_answer_tokens", s.long_answer_tokens))
        for key, tokens in asked:
            if tokens + prompt > limit:
                raise LoadError(
                    f"{key} asks for answers of {tokens} tokens, and with prompts of up to "
                    f"{prompt} they do not fit model {card.get('id')!r}: its max_model_len is "
                    f"{limit} (its /v1/models); lower {key} to at most {limit - prompt}"
                )

    def start(self) -> LoadRun:
        self.load_dir.mkdir(parents=True, exist_ok=True)
        for stale in ("stop", STATUS_FILE):
            (self.load_dir / stale).unlink(missing_ok=True)
        (self.run_dir / "records.jsonl").unlink(missing_ok=True)
        s = self.settings
        n_workers = s.workers + s.external_workers
        runtime = {
            "url": self.url,
            "settings": asdict(s),
            "thresholds": asdict(self.thresholds),
            "run_dir": str(self.run_dir),
            "parent_pid": os.getpid(),
            "worker_count": max(1, n_workers),
        }
        config_path = self.load_dir / "runtime.json"
        write_atomic(config_path, json.dumps(runtime, indent=2))
        env = dict(os.environ, ROLLCHECK_LOAD_CONFIG=str(config_path))
        classes = ["RateUser"] if s.shape == "rate" else ["ChatUser"]
        users = max(1, n_workers) if s.shape == "rate" else s.users
        if s.long_answer_user:
            classes.append("LongAnswerUser")
            users += 1
        base = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE)]
        base += ["--exit-code-on-error", "0", "--loglevel", "WARNING"]
        lead = base + ["-u", str(users), "-r", str(s.spawn_rate), *classes]
        if s.web_ui:
            # the web UI, started at once with the run's users; stopped by the run, as ever
            host, web_port = web_ui_address(s.web_ui)
            lead += ["--autostart", "--web-host", host, "--web-port", str(web_port)]
        else:
            lead.append("--headless")
        if n_workers:
            port = s.master_port or free_port()
            lead += ["--master", "--master-bind-host", s.master_bind]
            lead += ["--master-bind-port", str(port), "--expect-workers", str(n_workers)]
            self.master_address = f"{s.master_bind}:{port}"
        self.master = self._spawn(lead, env, "master")
        local = "127.0.0.1" if s.master_bind in ("0.0.0.0", "*", "") else s.master_bind
        for i in range(s.workers):
            cmd = base + ["--headless", "--worker", "--master-host", local]
            cmd += ["--master-port", str(port)]
            wenv = dict(env, ROLLCHECK_WORKER_INDEX=str(i))
            self.workers.append(self._spawn(cmd + classes, wenv, f"worker-{i}"))
        self._wait(lambda st: st is not None, self.start_timeout_s, "Locust to start")
        return self

    def _spawn(self, cmd: list[str], env: dict, name: str) -> subprocess.Popen:
        log = open_append(self.load_dir / f"{name}.log", binary=True, truncate=True)
        self._logs.append(log)
        proc = subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        if self.settings.cpus:  # (a process just started: it only moves cores)
            os.sched_setaffinity(proc.pid, self.settings.cpus)
        return proc

    def status(self) -> LoadStatus | None:
        return LoadStatus.read(self.load_dir)

    def counts(self) -> dict:
        """Live counts: sent, finished (records written), in flight, and of the finished,
        complete and broken (every other outcome) as the workers judged them."""
        st = self.status() or LoadStatus()
        complete = st.outcomes.get("complete", 0)
        return {
            "sent": st.sent,
            "finished": st.records,
            "in_flight": st.in_flight,
            "complete": complete,
            "broken": sum(st.outcomes.values()) - complete,
        }

    def settled_at(self) -> float | None:
        """The time before which every stream sent has its record in records.jsonl (the
        oldest stream in flight's start); None before the workers first reported. Read it
        before the records: a stream sent before it has ended, whatever its pace, so a
        count of the streams sent before it does not favour the faster answers."""
        return (self.status() or LoadStatus()).settled_at

    def outlasting(self, t: float) -> set[str] | None:
        """The pods (addresses, as the gateway names them) holding a stream that should
        still be streaming at epoch time t, at its pace so far; None when the gateway
        names no stream's pod (only rollcheck's own nginx is known to)."""
        streams = (self.status() or LoadStatus()).streams
        named = [s for s in streams if isinstance(s, dict) and s.get("upstream")]
        if not named:
            return None
        return {s["upstream"] for s in named if (s.get("ends_at") or 0) > t}

    def wait_until_in_flight(self, n: int, timeout_s: float = 30.0) -> None:
        self._wait(lambda st: st.in_flight >= n, timeout_s, f"{n} streams in flight")

    def wait_until_step(self, timeout_s: float) -> float:
        """When the step shape's load step happened (epoch seconds, Locust's own clock)."""
        return self._wait(lambda st: st.step_at, timeout_s, "the load step").step_at

    def wait_until_sent(self, n: int, timeout_s: float = 30.0) -> None:
        self._wait(lambda st: st.sent >= n, timeout_s, f"{n} requests sent")

    def _wait(self, cond, timeout_s: float, what: str) -> LoadStatus:
        def status_if_met():
            st = self.status()
            return st if st is not None and cond(st) else None

        return wait_until(
            status_if_met,
            timeout_s,
            what,
            error=LoadError,
            alive=self._check_alive,
            detail=lambda: f"load status: {self.counts()}",
        )

    def set_models(self, models: list[ModelShare], timeout_s: float = 10.0) -> float:
        """From now on the requests name these models with these weights (the rest
        load.model): the master passes the mix on to every worker; returns when all have
        taken it (epoch seconds, from the workers' status)."""
        try:
            check_models(models)
        except ValueError as exc:
            raise ConfigError(f"load: {exc}") from None
        self._models_seq += 1
        seq = self._models_seq
        data = {"seq": seq, "models": [asdict(m) for m in models]}
        write_atomic(self.load_dir / "models.json", json.dumps(data))
        self._wait(
            lambda st: st.models_seq >= seq,
            timeout_s,
            f"every worker to take the model mix {seq}",
        )
        return time.time()

    def hold(self, seconds: float, what: str = "time to pass") -> None:
        """Let `seconds` pass with the load on; LoadError at once if Locust dies."""
        hold(seconds, alive=self._check_alive, what=what)

    def ask(self, url: str, prompts: list, model: str | None, client_settings: dict) -> list:
        """Golden prompts (harness.canary) to one engine's URL, one at a time, each streamed
        and judged as the load's are: beside the load, they must not push its TTFT over
        the SLO (two at a time did, on kube-local's two replicas of four slots each)."""
        from harness.canary import ask

        return ask(
            url,
            prompts,
            model,
            stall_timeout_s=self.thresholds.stall_timeout_s,
            concurrency=1,
            client_settings=client_settings,
        )

    def _check_alive(self) -> None:
        if self.master is not None and self.master.poll() is not None:
            raise LoadError(
                f"Locust exited with code {self.master.returncode}: {self._tail('master')}"
            )

    def _tail(self, name: str, lines: int = 3) -> str:
        try:
            text = (self.load_dir / f"{name}.log").read_text(errors="replace").strip()
        except OSError:
            return "(no log)"
        return " | ".join(text.splitlines()[-lines:]) or "(empty log)"

    def stop(self) -> LoadResult:
        """Drain: users finish their stream up to stop_timeout_s; the rest are cancelled."""
        if self.result is not None:
            return self.result
        problems: list[str] = []
        write_atomic(self.load_dir / "stop", json.dumps({"time": time.time()}))
        budget = self.settings.stop_timeout_s + 30
        try:
            self.master.wait(budget)
        except subprocess.TimeoutExpired:
            problems.append(f"Locust did not stop within {budget} s: {self._tail('master')}")
        for i, worker in enumerate(self.workers):
            try:
                code = worker.wait(10)  # workers quit with the master, exit code 0
            except subprocess.TimeoutExpired:
                code = None
            if code != 0:
                problems.append(f"worker-{i} exited with code {code}: {self._tail(f'worker-{i}')}")
        self.close()
        status = self.status() or LoadStatus()
        records = (
            list(read_jsonl(self.run_dir / "records.jsonl", limit=OWN_RECORDS_LIMIT))
            if (self.run_dir / "records.jsonl").exists()
            else []
        )
        sent = status.sent
        if status.state != "done":
            problems.append(f"Locust ended without finishing the run ({self._tail('master')})")
        for wid in status.lost_workers:
            problems.append(f"worker {wid} never reported its last records")
        result = LoadResult(records, sent, status)
        ids = [r.request_id for r in records]
        twice = len(ids) - len(set(ids))
        if not sent == len(records) == result.outcome_total or twice:
            problems.append(
                f"accounting: sent {sent}, records {len(records)} ({twice} written twice), "
                f"outcomes counted {result.outcome_total}: requests were lost or doubled"
            )
        result.problems = problems
        self.result = result
        return result

    def close(self) -> None:
        """Stop every process of the run (idempotent)."""
        for proc in [self.master, *self.workers]:
            if proc is not None:  # the group, whether or not its leader is alive
                kill_group(proc, signal.SIGKILL)
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
        for log in self._logs:
            log.close()
        self._logs = []

    def __enter__(self) -> LoadRun:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.result is None and exc[0] is not None:
            self.close()
        elif self.result is None:
            self.stop()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_budget(seconds: float = 4.0, streams: int = 32, tokens_s: float = 100.0) -> float:
    """Token events a second one Locust process reads here using half a core (TARGET_CPU):
    `streams` streams of `tokens_s` tokens a second from a local simulator (a pace where
    each event is its own read, as from an engine), its events over its CPU seconds."""
    from harness.proc import running_sim
    from harness.sim.settings import SimSettings

    sim = SimSettings(port=free_port(), ttft_s=0.0, itl_s=1.0 / tokens_s, max_num_seqs=4096)
    settings = LoadSettings(
        users=streams,
        spawn_rate=1000,
        workers=0,
        max_tokens=[Share(int(tokens_s * 2))],
        stop_timeout_s=0.5,
    )
    with running_sim(sim) as url, tempfile.TemporaryDirectory() as folder:
        run = LoadRun(url, Path(folder), settings, Thresholds(30))
        run.start()
        try:
            run.wait_until_in_flight(streams, timeout_s=30)
            cpu0, t0 = _cpu_seconds(run.master.pid), time.time()
            time.sleep(seconds)
            cpu = _cpu_seconds(run.master.pid) - cpu0
        finally:
            result = run.stop()
    # the events of the window, as the streams' share of it (each stream's events spread
    # evenly over its life)
    t1 = t0 + seconds
    events = 0.0
    for r in result.records:
        if r.events and r.duration_s > 0:
            overlap = min(r.ended_at, t1) - max(r.sent_at, t0)
            events += r.events * max(0.0, overlap) / r.duration_s
    if cpu <= 0 or events <= 0:
        raise RuntimeError(f"the load read {events:.0f} events using {cpu:.2f} CPU seconds")
    return events / cpu * TARGET_CPU
