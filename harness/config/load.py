"""The `load:` section of the config: the load's shape, its prompt and answer-length mixes,
its workers. The config package reads it; loadgen (the Locust users) and harness.load
import it from here, so nothing in the config reaches up into what runs the load."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

SHAPES = ("users", "rate", "step")


@dataclass
class Share:
    """A value drawn with a weight: `{tokens: 2000, weight: 0.2}`."""

    tokens: int
    weight: float = 1.0


@dataclass
class ModelShare:
    """A share of the load's requests that name a model (an adapter) of their own:
    `{model: support-v1, weight: 0.5}`; the rest name load.model."""

    model: str
    weight: float


@dataclass
class LoadSettings:
    shape: str = "users"  # users: closed loop; rate: Poisson arrivals; step: users, then more
    users: int = 8
    spawn_rate: float = 100.0
    rate_rps: float = 4.0
    step_users: int = 16
    step_at_s: float = 10.0
    think_time_s: float = 0.0
    prompt_tokens: list[Share] = field(default_factory=lambda: [Share(64)])
    # a share of long answers, so streams are in flight whenever a pod is disturbed
    max_tokens: list[Share] = field(default_factory=lambda: [Share(32, 0.8), Share(160, 0.2)])
    ignore_eos: bool = True
    long_answer_user: bool = False  # one extra user that keeps one very long answer in flight
    long_answer_tokens: int = 2000
    long_answer_count: int = 0  # answers the long user sends; 0 = one after another until stopped
    model: str | None = None
    # shares of the requests that name other models (LoRA adapters): the rest name `model`.
    # adapter_rollout moves them while the load runs (LoadRun.set_models)
    models: list[ModelShare] = field(default_factory=list)
    # the NAME of an environment variable holding the API key (sent as a bearer token on
    # every request, readiness calls included); the key itself is never in a file
    api_key_env: str | None = None
    path: str = "/v1/chat/completions"
    # auto: as many local workers as the load's events/s need (harness/load_sizing.py),
    # one process when one is enough; 0: one local process; N: a master and N local workers
    workers: int | str = "auto"
    # workers started elsewhere (the chart's locust.workers), awaited by the master
    external_workers: int = 0
    # where the master listens for workers: loopback for local workers; in a cluster,
    # 0.0.0.0 and the port the chart's <release>-locust-master Service targets
    master_bind: str = "127.0.0.1"
    master_port: int = 0  # 0: a free port (local workers only)
    stop_timeout_s: float = 12.0  # at stop, users may finish their stream this long
    start_timeout_s: float = 30.0  # longest wait for Locust (and every worker) to start
    seed: int = 0
    # HOST:PORT (or PORT, on 127.0.0.1): the master runs Locust's web UI there instead of
    # headless, to watch the request rate and latency charts; the scenario still starts and
    # stops the load, and every record is still shipped and counted
    web_ui: str | None = None
    # the CPUs the load's processes run on (Linux affinity), e.g. [1]: on the local target,
    # keeps the client off the engines' cores; empty: any
    cpus: list[int] = field(default_factory=list)
    # what reads the streams: lean (harness.http1, about half the CPU an event) or httpx
    # (the reader before it, kept for a gateway the lean reader cannot talk to; proxies
    # from the environment go through httpx either way)
    http_client: str = "lean"

    def validate(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"shape must be one of {', '.join(SHAPES)}, not {self.shape!r}")
        if self.workers != "auto" and (
            isinstance(self.workers, bool) or not isinstance(self.workers, int)
        ):
            raise ValueError(f"workers must be auto or a whole number, not {self.workers!r}")
        counts = ("users", "step_users", "external_workers", "long_answer_tokens")
        for name in counts + (("workers",) if self.workers != "auto" else ()):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} cannot be negative ({getattr(self, name)})")
        if self.rate_rps < 0 or self.spawn_rate <= 0:
            raise ValueError("rate_rps must be >= 0 and spawn_rate > 0")
        for mix_name in ("prompt_tokens", "max_tokens"):
            mix = getattr(self, mix_name)
            if not mix or any(s.tokens < 1 or s.weight < 0 for s in mix):
                raise ValueError(f"{mix_name}: need at least one share, tokens >= 1, weight >= 0")
        check_models(self.models)
        if not 0 <= self.master_port <= 65535:
            raise ValueError(f"master_port must be 0-65535, not {self.master_port}")
        if self.external_workers and not self.master_port:
            raise ValueError(
                "external_workers need a known master_port (and master_bind 0.0.0.0 in a "
                "cluster): the port the chart's workers dial"
            )
        if self.http_client not in ("lean", "httpx"):
            raise ValueError(f"http_client must be lean or httpx, not {self.http_client!r}")
        if not self.path.startswith("/"):
            raise ValueError(f"path must start with '/', got {self.path!r}")
        if self.web_ui is not None:
            web_ui_address(self.web_ui)
        if self.cpus:
            usable = sorted(os.sched_getaffinity(0))
            wrong = [c for c in self.cpus if not isinstance(c, int) or c not in usable]
            if wrong:
                raise ValueError(
                    f"cpus: {wrong[0]!r} is not a CPU this process may run on "
                    f"({', '.join(map(str, usable))}); name some of those"
                )


def web_ui_address(value: object) -> tuple[str, int]:
    """load.web_ui as (host, port): HOST:PORT, or a PORT alone on 127.0.0.1."""
    text = str(value).strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 1 <= int(port) <= 65535 or any(c.isspace() for c in host):
        raise ValueError(
            f"web_ui: {text!r} is not HOST:PORT (a port 1-65535, e.g. 127.0.0.1:8089 or 8089)"
        )
    return host, int(port)


def check_models(models: list[ModelShare]) -> None:
    """ValueError unless each share names a model, weighs 0-1, and they add up to 1 at most."""
    for m in models:
        if not m.model or not 0 <= m.weight <= 1:
            raise ValueError(f"models: each needs a model name and a weight 0-1, not {m}")
    if sum(m.weight for m in models) > 1 + 1e-9:
        raise ValueError("models: the weights add up to more than 1 (the rest name load.model)")


def draw_model(models: list[ModelShare], base: str | None, r: float) -> str | None:
    """The model a request names, for a uniform draw r in [0, 1)."""
    for m in models:
        if r < m.weight:
            return m.model
        r -= m.weight
    return base
