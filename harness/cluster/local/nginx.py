"""The local gateway: a real nginx, streaming-safe, fed an endpoint set after a delay.

Endpoint changes reach nginx `endpoint_delay_s` after the cluster made them, as
kube-proxy and ingress controllers learn of them late. A change rewrites the
routes and reloads nginx: new requests use the new set, while old workers
finish the streams they hold.

A split (weighted_canary) sends a share of the requests to a candidate's endpoints and
the rest to the stable ones, as a Gateway API HTTPRoute's backendRefs weights do: nginx's
split_clients on its own random $request_id, so each request draws its backend
independently, as Envoy's weighted clusters draw theirs. A mirror (shadow) copies a share
of the requests to the candidate's endpoints and discards its answers, as an HTTPRoute's
RequestMirror filter does: nginx's mirror module, each mirrored request logged in
mirror.log (its status and upstream, joined to the user's request by X-Request-Id).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harness.client import UPSTREAM_HEADER
from harness.cluster.local.kubelet import stop_with_parent
from harness.errors import RollcheckError
from harness.files import open_append, write_atomic
from harness.proc import children, cmdline, free_port, kill_group
from harness.waits import wait_until

# One JSON object per request: the fields that join a log line to a stream record.
LOG_FORMAT = (
    "log_format rollcheck escape=json '{"
    '"time":$msec,"connection":$connection,"request_id":"$http_x_request_id",'
    '"status":$status,"upstream_addr":"$upstream_addr","upstream_status":"$upstream_status",'
    '"body_bytes_sent":$body_bytes_sent,"request_time":$request_time,'
    '"upstream_response_time":"$upstream_response_time","request":"$request"'
    "}';"
)
# ingress-nginx's default log-format-upstream, as its controller pods write it
# ($proxy_upstream_name and $req_id are ingress-nginx's own variables: here a fixed
# upstream name, and the client's X-Request-Id, which ingress-nginx keeps as $req_id)
UPSTREAMINFO_FORMAT = (
    'log_format upstreaminfo \'$remote_addr - $remote_user [$time_local] "$request" '
    '$status $body_bytes_sent "$http_referer" "$http_user_agent" $request_length '
    "$request_time [rollcheck-engines-8000] [] $upstream_addr $upstream_response_length "
    "$upstream_response_time $upstream_status $http_x_request_id';"
)


class GatewayError(RollcheckError, RuntimeError):
    pass


@dataclass(frozen=True)
class Split:
    """percent of the requests to the candidate's endpoints, the rest to the stable ones
    (a backend with no endpoint answers its share with 503, as a Gateway API
    implementation does). A stable set that holds the candidate's endpoints too is a
    Service whose selector matches both versions: the candidate then serves more than
    its weight."""

    version: str
    percent: float
    candidate: tuple[str, ...]
    stable: tuple[str, ...]
    mirror: float = 0.0  # percent of the requests copied to the candidate, answers discarded

    def as_dict(self) -> dict:
        return {
            "version": self.version,
            "percent": self.percent,
            "candidate": list(self.candidate),
            "stable": list(self.stable),
            "mirror": self.mirror,
        }


def find_nginx() -> str:
    found = shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None
    )
    if found is None:
        raise GatewayError(
            "nginx is not installed; install it with `apt-get install nginx-light` "
            "(scripts/run does this when run as root)"
        )
    return found


class Nginx:
    def __init__(
        self,
        run_dir: Path,
        port: int,
        endpoint_delay_s: float,
        read_timeout_s: float,
        emit=lambda *a, **k: None,
        access_format: str = "rollcheck",
        connect_timeout_s: float = 60.0,
        passive_health: tuple[int, float] | None = None,
        balance: str = "round_robin",
        mirror_reads_answers: bool = True,
    ):
        """access_format: rollcheck (JSON lines, access.log and error.log), or
        upstreaminfo (ingress-nginx's: access and error lines in one controller.log, as
        its pod's log interleaves them). connect_timeout_s: nginx's proxy_connect_timeout
        (its default 60 s); a connect that fails or times out is retried on another
        upstream (proxy_next_upstream's default). passive_health: (max_fails,
        fail_timeout_s) per upstream; None: max_fails=0, every upstream always tried.
        balance: round_robin (nginx's default) or least_conn (the fewest open streams).
        mirror_reads_answers: a mirrored request's whole answer is read (the mirror reader,
        as Envoy's mirroring reads it); false: nginx's mirror alone, which closes each
        mirrored request after its headers."""
        if access_format not in ("rollcheck", "upstreaminfo"):
            raise ValueError(f"access_format must be rollcheck or upstreaminfo: {access_format!r}")
        self.access_format = access_format
        self.connect_timeout_s = connect_timeout_s
        self.passive_health = passive_health
        self.balance = balance
        self.dir = Path(run_dir) / "gateway"
        self.port = port
        self.mirror_port = free_port()  # the candidate's server, for mirrored requests
        self.mirror_reads_answers = mirror_reads_answers
        self.reader_port = free_port()
        self.reader: subprocess.Popen | None = None
        self.delay_s = endpoint_delay_s
        self.read_timeout_s = read_timeout_s
        self.emit = emit
        self.proc: subprocess.Popen | None = None
        self._pending: list[tuple[float, tuple[str, ...], Split | None]] = []
        self._applied: tuple[str, ...] | None = None
        self._applied_split: Split | None = None
        self._cv = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="gateway", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def applied(self) -> tuple[str, ...]:
        """The endpoint set nginx routes to now."""
        return self._applied or ()

    @property
    def applied_split(self) -> Split | None:
        """The split nginx applies now (None: every endpoint alike)."""
        return self._applied_split

    @property
    def access_log(self) -> Path:
        return self.dir / ("access.log" if self.access_format == "rollcheck" else "controller.log")

    @property
    def mirror_log(self) -> Path:
        """One line per mirrored request (rollcheck's JSON format): the candidate's answer."""
        return self.dir / "mirror.log"

    @property
    def error_log(self) -> Path:
        return self.dir / ("error.log" if self.access_format == "rollcheck" else "controller.log")

    def start(self) -> None:
        binary = find_nginx()
        self.dir.mkdir(parents=True, exist_ok=True)
        for name in ("client_body", "proxy"):
            (self.dir / name).mkdir(exist_ok=True)
        self._write_routes((), None)
        self._applied = ()
        write_atomic(self.dir / "nginx.conf", self._config())
        test = subprocess.run(
            [binary, "-t", "-p", str(self.dir), "-c", "nginx.conf"], capture_output=True, text=True
        )
        if test.returncode != 0:
            raise GatewayError(f"nginx rejected its config: {test.stderr.strip().splitlines()[-1]}")
        self.proc = subprocess.Popen(
            [binary, "-p", str(self.dir), "-c", "nginx.conf"],
            stdout=subprocess.DEVNULL,
            stderr=open_append(self.dir / "stderr.log", binary=True, truncate=True),
            start_new_session=True,
            preexec_fn=stop_with_parent,
        )
        # nginx writes its pid once it listens and handles signals (a SIGHUP before
        # that kills it). `nginx -t` leaves an empty pid file: wait for the number.
        pid_file = self.dir / "nginx.pid"

        def not_dead():
            if self.proc.poll() is not None:
                raise GatewayError(f"nginx did not start: {self._stderr_tail()}")

        wait_until(
            lambda: _read(pid_file).strip() == str(self.proc.pid),
            10,
            "nginx to write its pid",
            interval_s=0.02,
            error=lambda msg: GatewayError(f"{msg}: {self._stderr_tail()}"),
            alive=not_dead,
        )
        # The master forks its worker after it writes its pid, and the port takes
        # connections (into the backlog) before then. A reload before the worker is up
        # would take that worker, with the empty config, for the new config's (CI: the
        # first request after the first change was answered "no ready endpoints").
        master = self.proc.pid
        wait_until(
            lambda: any(cmdline(w).endswith("worker process") for w in children(master)),
            10,
            "nginx's worker",
            interval_s=0.005,
            error=lambda msg: GatewayError(f"{msg}: {self._stderr_tail()}"),
            alive=not_dead,
        )
        self._thread.start()

    def _stderr_tail(self) -> str:
        err = (self.dir / "stderr.log").read_text(errors="replace").strip()
        return err.splitlines()[-1] if err else "no output"

    def set_endpoints(self, addresses: list[str], split: Split | None = None) -> None:
        """The cluster's endpoint set (or the split over it) changed now; nginx learns of
        it after the delay."""
        with self._cv:
            at = time.monotonic() + self.delay_s
            self._pending.append((at, tuple(sorted(addresses)), split))
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stop and not self._pending:
                    self._cv.wait()
                if self._stop:
                    return
                apply_at, endpoints, split = self._pending[0]
                wait = apply_at - time.monotonic()
                if wait > 0:
                    self._cv.wait(wait)
                    continue
                self._pending.pop(0)
            if (endpoints, split) != (self._applied, self._applied_split):
                self._write_routes(endpoints, split)
                self._reload()
                self._applied, self._applied_split = endpoints, split
                detail = {"split": split.as_dict()} if split is not None else {}
                self.emit("gateway_updated", endpoints=list(endpoints), **detail)

    def _reload(self, timeout_s: float = 5.0) -> None:
        """Graceful reload (old workers finish their streams), returning once the new
        routes are the only ones a new connection can reach.

        After SIGHUP the master starts new workers and only then tells the old ones
        to stop accepting; until an old worker has closed its listening socket, a new
        connection can still land on it and its old routes (a 503 from a gateway
        that already "has" the endpoint).
        """
        master = self.proc.pid
        old = set(children(master))
        self.proc.send_signal(signal.SIGHUP)

        def only_new_workers_accept() -> bool:
            if self.proc.poll() is not None:
                return True  # nginx is gone: nothing left to wait for
            titles = {w: cmdline(w) for w in children(master)}
            # nginx retitles a worker "... is shutting down" just before it closes its
            # listening sockets.
            still_accepting = [w for w, t in titles.items() if w in old and t.endswith("process")]
            return any(w not in old for w in titles) and not still_accepting

        wait_until(only_new_workers_accept, timeout_s, "nginx's reload", 0.005, error=None)

    def _write_routes(self, endpoints: tuple[str, ...], split: Split | None) -> None:
        mirror = "return 204;"  # the mirror location's answer when nothing is mirrored
        reader = "return 503;"  # the reader's, with no candidate to read from
        if split is not None:
            pools = {"engines": split.stable, "engines_canary": split.candidate}
            routes = "".join(self._upstream(n, a) for n, a in pools.items() if a)
            # an empty backend's share is answered 503 here, as no upstream can be empty
            pool = {n: (n if a else "none") for n, a in pools.items()}
            shares = f"    {split.percent:g}% {pool['engines_canary']};\n" if split.percent else ""
            if split.percent < 100:
                shares += f"    * {pool['engines']};\n"
            routes += f'split_clients "${{request_id}}" $rollcheck_pool {{\n{shares}}}\n'
            location = (
                "if ($rollcheck_pool = none) { return 503; }\nproxy_pass http://$rollcheck_pool;"
            )
            if split.mirror and split.candidate:
                mirrored = f"    {split.mirror:g}% 1;\n" + (
                    "    * 0;\n" if split.mirror < 100 else ""
                )
                routes += f'split_clients "${{request_id}}" $rollcheck_mirrored {{\n{mirrored}}}\n'
                location = "mirror /rollcheck_mirror;\nmirror_request_body on;\n" + location
                to = self.mirror_port
                if self.mirror_reads_answers:
                    self._start_reader()
                    to = self.reader_port
                mirror = (
                    "if ($rollcheck_mirrored != 1) { return 204; }\n"
                    f"proxy_pass http://127.0.0.1:{to}$request_uri;"
                )
            if split.candidate:
                # the candidate's server passes on whatever the reader forwards while the
                # candidate is there, mirror on or not: the reader answers nginx at once
                # and forwards after, so a request mirrored just before the mirror is
                # turned off reaches it after the reload (CI: answered 503 here, once)
                reader = "proxy_pass http://engines_canary;"
        elif endpoints:
            routes = self._upstream("engines", endpoints)
            location = "proxy_pass http://engines;"
        else:
            # A Service with no ready endpoints: ingress-nginx answers 503.
            routes = ""
            location = (
                'default_type application/json; return 503 \'{"error": "no ready endpoints"}\';'
            )
        write_atomic(self.dir / "upstreams.conf", routes)
        write_atomic(self.dir / "location.conf", location + "\n")
        write_atomic(self.dir / "mirror.conf", mirror + "\n")
        write_atomic(self.dir / "reader.conf", reader + "\n")

    def _start_reader(self) -> None:
        """The mirror reader (harness/cluster/local/mirror_reader.py), once."""
        if self.reader is not None:
            return
        self.reader = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness.cluster.local.mirror_reader",
                f"127.0.0.1:{self.reader_port}",
                f"127.0.0.1:{self.mirror_port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open_append(self.dir / "mirror_reader.log", binary=True, truncate=True),
            start_new_session=True,
            preexec_fn=stop_with_parent,
        )
        wait_until(
            lambda: _listening(self.reader_port),
            10,
            "the mirror reader to listen",
            interval_s=0.02,
            error=GatewayError,
        )

    def _upstream(self, name: str, endpoints: tuple[str, ...]) -> str:
        fails, window = self.passive_health or (0, 10.0)
        health = f"max_fails={fails}" + (f" fail_timeout={window:g}s" if fails else "")
        servers = "".join(f"    server {a} {health};\n" for a in endpoints)
        how = "    least_conn;\n" if self.balance == "least_conn" else ""
        return f"upstream {name} {{\n{how}{servers}    keepalive 64;\n}}\n"

    def _config(self) -> str:
        return f"""daemon off;
worker_processes 1;
pid nginx.pid;
error_log {self.error_log.name} error;
events {{ worker_connections 8192; }}
http {{
    {LOG_FORMAT}
    {UPSTREAMINFO_FORMAT}
    access_log {self.access_log.name} {self.access_format};
    client_body_temp_path client_body;
    proxy_temp_path proxy;
    client_body_buffer_size 1m;
    # Every endpoint change reloads nginx, and a reload closes idle keep-alive client
    # connections, racing with a request sent on one (the client sees a close before
    # headers). ingress-nginx changes endpoints without reloads, so to keep that
    # artifact out of the verdicts, client connections are not kept alive here.
    keepalive_timeout 0;
    include upstreams.conf;
    server {{
        listen 127.0.0.1:{self.port};
        location / {{
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Request-Id $http_x_request_id;
            proxy_buffering off;
            proxy_cache off;
            proxy_connect_timeout {self.connect_timeout_s:g}s;
            proxy_read_timeout {int(self.read_timeout_s)}s;
            proxy_send_timeout {int(self.read_timeout_s)}s;
            # which pod serves the stream, known to the client at its first byte (the
            # access log says so only once the stream has ended)
            add_header {UPSTREAM_HEADER} $upstream_addr always;
            include location.conf;
        }}
        # a mirrored request (shadow), with the user's request id. nginx's mirror reads
        # only the headers of its subrequest's answer and then closes it (the candidate
        # sees a client gone, and aborts a streaming answer at once: measured, facts.md):
        # so the subrequest goes to the mirror reader, which reads the whole answer from
        # the candidate's server below
        location = /rollcheck_mirror {{
            internal;
            access_log off;
            proxy_set_header X-Request-Id $http_x_request_id;
            include mirror.conf;
        }}
    }}
    # the candidate's server for mirrored requests, each logged in mirror.log
    server {{
        listen 127.0.0.1:{self.mirror_port};
        access_log mirror.log rollcheck;
        location / {{
            proxy_http_version 1.1;
            proxy_buffering off;
            proxy_set_header Connection "";
            proxy_set_header X-Request-Id $http_x_request_id;
            proxy_connect_timeout {self.connect_timeout_s:g}s;
            proxy_read_timeout {int(self.read_timeout_s)}s;
            proxy_send_timeout {int(self.read_timeout_s)}s;
            include reader.conf;
        }}
    }}
}}
"""

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        if self.proc is not None:
            # the workers too, when the master died first (they keep the listening socket)
            kill_group(self.proc, signal.SIGKILL)
            self.proc.wait(5)
        if self.reader is not None:
            kill_group(self.reader, signal.SIGKILL)
            self.reader.wait(5)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
