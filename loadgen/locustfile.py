"""rollcheck's Locust users: streaming chat load, every request judged and shipped.

Started by harness/load.py (`LoadRun`) with ROLLCHECK_LOAD_CONFIG naming a JSON
file: {"url", "settings", "thresholds", "run_dir", "parent_pid"}. A worker started
elsewhere (the chart's workers, `locust --worker --master-host ...`) has no such file: what
a worker needs (url, settings, thresholds) rides on the master's spawn message, as a
custom option (Locust hands custom options to its workers).
Each worker judges its streams with harness.client and ships StreamRecords to the
master in batches (Locust custom messages); the master writes records.jsonl and a
live status file. Stopping is ours, not Locust's, so that no request is lost:
LoadRun writes <run>/load/stop; the master tells workers to drain; users finish
their stream within stop_timeout_s; the rest are cancelled and still recorded.
"""

from __future__ import annotations

import collections
import json
import os
import random
import time
from pathlib import Path

import gevent
import gevent.pool
from locust import LoadTestShape, User, constant, events, task
from locust.exception import StopUser
from locust.runners import STATE_MISSING, MasterRunner, WorkerRunner

from harness import client_delay
from harness.client import chat_payload, make_client, new_request_id, stream_request
from harness.config import build
from harness.config.load import LoadSettings, ModelShare, draw_model
from harness.files import open_append
from harness.load_status import LoadStatus
from harness.proc import pid_alive
from harness.quantiles import quantile_of_sorted
from harness.streams import StreamObserver, StreamRecord, Thresholds
from harness.waits import wait_until
from loadgen.settings import auth_headers, draw, prompt_text

FLUSH_S = 0.25
LIVE_STREAMS = 200  # per worker, in its live status: the streams in flight that end last
MAX_BATCH = 500
MODELS_FILE = "models.json"  # LoadRun.set_models writes it; the master passes it on
WORKER_KEYS = ("url", "settings", "thresholds", "worker_count")  # what the master sends
RUNTIME: dict = {}
SETTINGS = LoadSettings()
THRESHOLDS = Thresholds()
URL = ""
RUN_DIR: Path | None = None  # the master's (or single process's) only


def configure(runtime: dict) -> None:
    """Take the run's settings: from ROLLCHECK_LOAD_CONFIG, or from the master."""
    global RUNTIME, SETTINGS, THRESHOLDS, URL, RUN_DIR
    RUNTIME = runtime
    SETTINGS = build(LoadSettings, runtime["settings"])
    THRESHOLDS = Thresholds(**runtime["thresholds"])
    URL = runtime["url"].rstrip("/") + SETTINGS.path
    RUN_DIR = Path(runtime["run_dir"]) if runtime.get("run_dir") else None
    ChatUser.wait_time = constant(SETTINGS.think_time_s)


_CONFIG_FILE = os.environ.get("ROLLCHECK_LOAD_CONFIG")


class WorkerState:
    """The worker side: counts, in-flight requests, the outgoing batch."""

    def __init__(self) -> None:
        self.sent = 0
        self.finished = 0
        self.outcomes: dict[str, int] = {}
        self.batch: list[dict] = []
        self.draining = False
        self.done = False
        self.in_flight: set[gevent.Greenlet] = set()
        # each stream in flight: its observer and the answer length it asked for
        self.live: dict[gevent.Greenlet, tuple[StreamObserver, int | None]] = {}
        # and when it was started (at or before its record's sent_at)
        self.started: dict[gevent.Greenlet, float] = {}
        # how late the hub runs (harness.client_delay): a histogram a second, shipped
        # to the master; the last half minute of them for the live status
        self.delay = client_delay.Windows()
        self.recent_delay: collections.deque = collections.deque(maxlen=30)
        self.rate_lag: collections.deque = collections.deque(maxlen=20000)
        self.rng = random.Random(SETTINGS.seed + os.getpid())
        self.client = make_client(
            THRESHOLDS.stall_timeout_s,
            headers=auth_headers(SETTINGS.api_key_env),
            transport=SETTINGS.http_client,
        )
        # and how long each piece of an answer waited in its socket before it was read
        self.client.on_arrival = self.delay.arrived
        # the models the requests name (load.models), moved by LoadRun.set_models: the
        # change's sequence number, and whether any request names a model of its own
        self.models: list[ModelShare] = list(SETTINGS.models)
        self.models_seq = 0
        self.tag_models = bool(self.models)

    def set_models(self, data: dict) -> None:
        self.models = [ModelShare(**m) for m in data["models"]]
        self.models_seq = data["seq"]
        self.tag_models = True

    def record(self, environment, record: StreamRecord) -> None:
        self.finished += 1
        self.outcomes[record.outcome] = self.outcomes.get(record.outcome, 0) + 1
        self.batch.append(json.loads(record.to_json()))
        ok = record.outcome == "complete"
        environment.events.request.fire(
            request_type="SSE",
            name=SETTINGS.path,
            response_time=record.duration_s * 1000,
            response_length=record.bytes,
            exception=None if ok else Exception(record.outcome),
            context={"request_id": record.request_id},
        )
        if record.ttft_s is not None:
            environment.events.request.fire(
                request_type="TTFT",
                name=SETTINGS.path,
                response_time=record.ttft_s * 1000,
                response_length=0,
                exception=None,
                context={},
            )

    def one_request(self, environment, max_tokens: int, tags: dict) -> None:
        self.sent += 1
        i = self.sent
        model = draw_model(self.models, SETTINGS.model, self.rng.random())
        if self.tag_models:
            tags = dict(tags, model=model or "")
        payload = chat_payload(
            model,
            prompt_text(draw(SETTINGS.prompt_tokens, self.rng), i),
            max_tokens,
            ignore_eos=SETTINGS.ignore_eos,
        )
        me = gevent.getcurrent()
        self.in_flight.add(me)
        self.started[me] = time.time()

        def keep(record: StreamRecord) -> None:
            record.tags = tags
            self.record(environment, record)

        def watch(obs: StreamObserver) -> None:
            self.live[me] = (obs, max_tokens)

        try:
            stream_request(
                self.client,
                URL,
                payload,
                THRESHOLDS,
                request_id=new_request_id(),
                on_record=keep,
                on_start=watch,
            )
        finally:
            self.in_flight.discard(me)
            self.live.pop(me, None)
            self.started.pop(me, None)

    def streams(self) -> list[dict]:
        """The streams in flight whose gateway named their pod: the pod's address, and
        when the answer should end at its pace so far (None: too early to tell); the
        LIVE_STREAMS that end last, so the status stays small under any load."""
        out = []
        for obs, max_tokens in list(self.live.values()):
            if obs.upstream:
                end = obs.expected_end(max_tokens)
                out.append({"request_id": obs.request_id, "upstream": obs.upstream, "ends_at": end})
        if len(out) > LIVE_STREAMS:
            out = sorted(out, key=lambda s: s["ends_at"] or 0, reverse=True)[:LIVE_STREAMS]
        return out

    def message(self, environment, done: bool = False) -> dict:
        # every stream started before settled_at has its record in this batch or an
        # earlier one: the oldest stream in flight's start, or now with none in flight
        settled_at = min(self.started.values(), default=time.time())
        batch, self.batch = self.batch, []
        runner = environment.runner
        windows = self.delay.take(final=done)
        self.recent_delay.extend(windows)
        return {
            "records": batch,
            "delay_windows": windows,
            "sent": self.sent,
            "finished": self.finished,
            "outcomes": dict(self.outcomes),
            "in_flight": len(self.in_flight),
            "settled_at": settled_at,
            "streams": self.streams(),
            "loop_lag": client_delay.summarize(self.recent_delay) or _pcts([]),
            "rate_lag": _pcts(self.rate_lag),
            "cpu_warning": bool(getattr(runner, "cpu_warning_emitted", False)),
            "models_seq": self.models_seq,
            "done": done,
            "pid": os.getpid(),
        }


def _summed(counts: list[dict]) -> dict:
    out: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


def _pcts(values: list[float]) -> dict:
    if not values:
        return {"p50_s": None, "p99_s": None, "n": 0}
    s = sorted(values)
    return {"p50_s": quantile_of_sorted(s, 0.5), "p99_s": quantile_of_sorted(s, 0.99), "n": len(s)}


STATE: WorkerState | None = None


class Collector:
    """The master side: writes records as they come and a live status file."""

    def __init__(self, environment) -> None:
        self.env = environment
        (RUN_DIR / "load").mkdir(parents=True, exist_ok=True)
        self.records = open_append(RUN_DIR / "records.jsonl")
        self.written = 0
        self.workers: dict[str, dict] = {}
        self.state = "running"
        self.lost: list[str] = []
        self.delay = open_append(RUN_DIR / "load" / client_delay.FILE, truncate=True)
        self.models_seq = 0

    def on_records(self, environment, msg, **_) -> None:
        data = msg.data
        for rec in data["records"]:
            self.records.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self.written += len(data["records"])
        self.records.flush()
        for window in data.get("delay_windows") or []:
            line = dict(window, worker=msg.node_id)
            self.delay.write(json.dumps(line, separators=(",", ":")) + "\n")
        self.delay.flush()
        info = {k: v for k, v in data.items() if k not in ("records", "delay_windows")}
        info["received"] = self.workers.get(msg.node_id, {}).get("received", 0) + len(
            data["records"]
        )
        self.workers[msg.node_id] = info

    def status(self) -> LoadStatus:
        ws = self.workers.values()
        runner = self.env.runner
        cpu = any(w.get("cpu_warning") for w in ws) or bool(
            getattr(runner, "worker_cpu_warning_emitted", False)
            or getattr(runner, "cpu_warning_emitted", False)
        )
        return LoadStatus(
            state=self.state,
            sent=sum(w["sent"] for w in ws),
            records=self.written,
            in_flight=sum(w["in_flight"] for w in ws),
            settled_at=min((w.get("settled_at") or 0 for w in ws), default=None),
            outcomes=_summed([w.get("outcomes") or {} for w in ws]),
            streams=[s for w in ws for s in w.get("streams") or []],
            workers=self.workers,
            lost_workers=self.lost,
            cpu_warning=cpu,
            time=time.time(),
            step_at=STEP_AT[0] if STEP_AT else None,
            models_seq=min((w.get("models_seq", 0) for w in ws), default=0),
        )

    def write_status(self) -> None:
        self.status().write(RUN_DIR / "load")

    def run(self) -> None:
        stop_file = RUN_DIR / "load" / "stop"
        parent = int(RUNTIME.get("parent_pid") or 0)
        while not stop_file.exists():
            self.pass_on_models()
            self.write_status()
            if parent and not pid_alive(parent):
                break  # the harness died: stop rather than run on as an orphan
            gevent.sleep(0.1)
        self.state = "stopping"
        grace = SETTINGS.stop_timeout_s
        self.env.runner.send_message("rollcheck_stop", {"grace_s": grace})

        def every_worker_done() -> bool:
            self.write_status()
            expected = self._expected_workers()
            return bool(expected) and all(self.workers.get(w, {}).get("done") for w in expected)

        wait_until(
            every_worker_done,
            grace + 15,
            "the workers' last records",
            0.1,
            None,
            sleep=gevent.sleep,
        )
        self.lost = [wid for wid, w in self.workers.items() if not w.get("done")]
        self.state = "done"
        self.records.close()
        self.delay.close()
        self.write_status()
        self.env.runner.quit()
        if getattr(self.env, "web_ui", None) is not None:  # load.web_ui: the process ends too
            self.env.web_ui.stop()

    def pass_on_models(self) -> None:
        """A new model mix from LoadRun.set_models (load/models.json): to every worker."""
        try:
            data = json.loads((RUN_DIR / "load" / MODELS_FILE).read_text())
        except (OSError, ValueError):
            return
        if data.get("seq", 0) <= self.models_seq:
            return
        self.models_seq = data["seq"]
        if isinstance(self.env.runner, MasterRunner):
            self.env.runner.send_message("rollcheck_models", data)
        elif STATE is not None:
            STATE.set_models(data)

    def _expected_workers(self) -> list[str]:
        """Workers whose last records we wait for: every one Locust has not lost."""
        runner = self.env.runner
        if isinstance(runner, MasterRunner):
            return [c.id for c in runner.clients.all if c.state != STATE_MISSING]
        return ["local"]


@events.init.add_listener
def on_init(environment, **_kwargs) -> None:
    runner = environment.runner
    if not isinstance(runner, WorkerRunner):
        if not RUNTIME:
            raise SystemExit(
                "rollcheck's Locust master needs ROLLCHECK_LOAD_CONFIG (LoadRun sets it)"
            )
        collector = Collector(environment)
        runner.register_message("rollcheck_records", collector.on_records)
        gevent.spawn(collector.run)
    if isinstance(runner, MasterRunner):
        # every spawn message carries the master's parsed options to its workers
        environment.parsed_options.rollcheck_runtime = {k: RUNTIME[k] for k in WORKER_KEYS}
    else:
        runner.register_message("rollcheck_stop", _on_stop)
        runner.register_message("rollcheck_models", _on_models)
        if RUNTIME:
            _start_worker(environment)


@events.test_start.add_listener
def on_test_start(environment, **_kwargs) -> None:
    """A worker started elsewhere learns the run from its master's spawn message, which
    Locust delivers before it starts any user."""
    runtime = getattr(environment.parsed_options, "rollcheck_runtime", None)
    if isinstance(environment.runner, WorkerRunner) and STATE is None and runtime:
        configure(runtime)
        _start_worker(environment)


def _start_worker(environment) -> None:
    global STATE
    STATE = WorkerState()
    gevent.spawn(_flusher, environment)
    gevent.spawn(_loop_lag_monitor)


def _flusher(environment) -> None:
    # Counts go with every flush, records or not, so the master's live view stays current.
    while not STATE.done:
        gevent.sleep(FLUSH_S)
        if not STATE.done:
            environment.runner.send_message("rollcheck_records", STATE.message(environment))


def _loop_lag_monitor() -> None:
    # How late a sleeping greenlet wakes: the wait every stream's next chunk sees before
    # the hub reads it (harness.client_delay).
    period = client_delay.PERIOD_S
    while True:
        t = time.monotonic()
        gevent.sleep(period)
        STATE.delay.add(max(0.0, time.monotonic() - t - period))


def _on_models(environment, msg, **_) -> None:
    if STATE is not None:
        STATE.set_models(msg.data)


def _on_stop(environment, msg, **_) -> None:
    def drain() -> None:
        STATE.draining = True
        idle = lambda: not STATE.in_flight  # noqa: E731
        wait_until(
            idle, msg.data["grace_s"], "the answers in flight", error=None, sleep=gevent.sleep
        )
        # Still open at the deadline: end them; each becomes a `cancelled` record.
        gevent.killall(list(STATE.in_flight), block=True, timeout=5)
        STATE.done = True
        environment.runner.send_message("rollcheck_records", STATE.message(environment, done=True))

    gevent.spawn(drain)


class ChatUser(User):
    """Closed loop: one streamed chat request after another."""

    wait_time = constant(SETTINGS.think_time_s)

    @task
    def chat(self) -> None:
        if STATE is None:  # a worker still waiting for its master's settings
            gevent.sleep(0.1)
            return
        if STATE.draining:
            raise StopUser()
        max_tokens = draw(SETTINGS.max_tokens, STATE.rng)
        STATE.one_request(self.environment, max_tokens, {"user": "chat", "max_tokens": max_tokens})


class LongAnswerUser(User):
    """Keeps exactly one very long answer in flight (the scale-to-zero victim)."""

    fixed_count = 1
    wait_time = constant(0)
    sent = 0

    @task
    def long_answer(self) -> None:
        if STATE is None:
            gevent.sleep(0.1)
            return
        if STATE.draining:
            raise StopUser()
        if SETTINGS.long_answer_count and self.sent >= SETTINGS.long_answer_count:
            gevent.sleep(0.1)  # its answers are done; stay idle until the run stops
            return
        self.sent += 1
        n = SETTINGS.long_answer_tokens
        STATE.one_request(self.environment, n, {"user": "long", "max_tokens": n})


class RateUser(User):
    """Open loop: Poisson arrivals at rate_rps (split across workers), each in its own greenlet."""

    wait_time = constant(0)

    @task
    def arrivals(self) -> None:
        if STATE is None:
            gevent.sleep(0.1)
            return
        workers = max(1, RUNTIME.get("worker_count", 1))
        rate = SETTINGS.rate_rps / workers
        pool = gevent.pool.Pool()
        index = os.environ.get("ROLLCHECK_WORKER_INDEX")
        index = int(index) if index else getattr(self.environment.runner, "worker_index", 0)
        rng = random.Random(SETTINGS.seed * 1000 + index)
        next_at = time.monotonic()
        while not STATE.draining:
            next_at += rng.expovariate(rate) if rate > 0 else 3600
            delay = next_at - time.monotonic()
            if delay > 0:
                gevent.sleep(delay)
            if STATE.draining:
                break
            STATE.rate_lag.append(max(0.0, time.monotonic() - next_at))
            max_tokens = draw(SETTINGS.max_tokens, STATE.rng)
            tags = {"user": "rate", "max_tokens": max_tokens}
            pool.spawn(STATE.one_request, self.environment, max_tokens, tags)
        pool.join()
        raise StopUser()


if _CONFIG_FILE:  # the master, a single process, or a worker LoadRun started
    configure(json.loads(Path(_CONFIG_FILE).read_text()))

STEP_AT: list[float] = []  # when the load step happened (epoch): the scale-up's disruption

if SETTINGS.shape == "step":

    class StepShape(LoadTestShape):
        """users until step_at_s, then step_users: a load step for scale-up."""

        def tick(self):
            extra = 1 if SETTINGS.long_answer_user else 0
            if self.get_run_time() < SETTINGS.step_at_s:
                return SETTINGS.users + extra, SETTINGS.spawn_rate
            if not STEP_AT:
                STEP_AT.append(time.time())
            return SETTINGS.step_users + extra, SETTINGS.spawn_rate
