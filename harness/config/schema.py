"""The run config: one schema for `rollcheck up`, the pytest plugin and the targets.

Durations end in `_s`. Engine keys are the simulator's own settings (snake_case
of its options), so a config line and a `rollcheck sim` flag mean the same.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from harness import rollout_math
from harness.config.load import LoadSettings
from harness.config.reader import ConfigError, apply_sets, build, load_yaml, said_set
from harness.engines.kinds import KINDS
from harness.sim.settings import SimSettings
from harness.streams.sse import MAX_EVENT_BYTES, event_limit_problem
from harness.urls import url_problem

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "rollcheck.yaml"


ENGINE_KINDS = tuple(KINDS)


@dataclass
class EngineSettings(SimSettings):
    """The engine each local pod runs: the simulator (its settings are these fields), or
    real vLLM's CPU build (scripts/build-vllm) on a locally built model; the shared
    fields (shutdown_timeout_s, max_num_seqs, model) apply to both."""

    kind: str = "sim"
    real_model: str = "slow"  # vllm: tiny (about 1 ms a token) or slow (about 13-60 ms)
    # the local simulators hold 1 MB of host memory per 1000 tokens of context in flight:
    # the load's streams hold well under 1 MB each, oom_kill's request 400 MB, above the
    # local pods' 256 MB limit (pod.memory_limit_mb)
    memory_mb_per_1k_tokens: float = 1.0

    def validate(self) -> None:
        super().validate()
        if self.kind not in ENGINE_KINDS:
            raise ValueError(f"kind must be one of {', '.join(ENGINE_KINDS)}, not {self.kind!r}")
        if self.real_model not in ("tiny", "slow"):
            raise ValueError(f"real_model must be tiny or slow, not {self.real_model!r}")


@dataclass
class Probe:
    period_s: float = 0.2
    failure_threshold: int = 3
    timeout_s: float = 1.0
    initial_delay_s: float = 0.0
    path: str = "/health"

    def validate(self) -> None:
        if self.period_s <= 0 or self.failure_threshold < 1:
            raise ValueError("a probe needs period_s > 0 and failure_threshold >= 1")


@dataclass
class PodSettings:
    prestop_s: float = 0.0  # preStop `sleep`, covering endpoint propagation
    termination_grace_s: float = 30.0  # terminationGracePeriodSeconds, from deletion start
    startup_probe: Probe | None = field(default_factory=lambda: Probe(0.1, 600))
    readiness_probe: Probe = field(default_factory=lambda: Probe(0.2, 1))
    liveness_probe: Probe | None = field(default_factory=lambda: Probe(1.0, 3))
    # the wait before a crashed container's first restart; each later one waits twice as
    # long, up to 300 s (the kubelet's CrashLoopBackOff: 10 s, 20 s, 40 s, ...)
    restart_backoff_s: float = 0.5
    # the container's memory limit (resources.limits.memory): the local kubelet kills the
    # engine when its resident memory crosses it, as the kernel's OOM killer would
    # (SIGKILL, exit 137, reason OOMKilled), and restarts it. None: no limit. A simulator
    # holds about 40 MB and its streams' context (engine.memory_mb_per_1k_tokens)
    memory_limit_mb: float | None = 256.0
    # tolerationSeconds of node.kubernetes.io/unreachable (NoExecute): how long the pods of
    # a node the control plane lost stay bound to it before they are deleted and replaced
    # elsewhere (Kubernetes adds 300 s to every pod that does not say)
    unreachable_toleration_s: float = 300.0


@dataclass
class Strategy:
    max_surge: str = "25%"
    max_unavailable: str = "25%"
    min_ready_s: float = 0.0
    # facts.md's model: a terminating pod keeps its GPU, so it counts toward maxSurge
    gpu_bound: bool = False

    def resolve(self, replicas: int) -> tuple[int, int]:
        """maxSurge rounds up, maxUnavailable down, as the Deployment controller does."""
        return rollout_math.resolve(self.max_surge, self.max_unavailable, replicas)

    def validate(self) -> None:
        self.resolve(4)


@dataclass
class PDB:
    min_available: int | None = None
    max_unavailable: int | None = None

    def min_healthy(self, replicas: int) -> int | None:
        if self.min_available is not None:
            return self.min_available
        if self.max_unavailable is not None:
            return replicas - self.max_unavailable
        return None


@dataclass
class Gateway:
    endpoint_delay_s: float = 0.3  # how long until the gateway learns of an endpoint change
    read_timeout_s: float = 3600.0
    # how the local gateway picks a replica: round_robin (nginx's and ingress-nginx's
    # default: each new request to the next, however busy) or least_conn (the replica with
    # the fewest streams open, as a load-aware inference gateway does)
    balance: str = "round_robin"
    # how long the local gateway waits for a connection to a replica before it tries
    # another (nginx's proxy_connect_timeout, 60 s by default); a replica whose node is
    # off never answers the connect
    connect_timeout_s: float = 60.0
    # passive health checks: a replica that fails max_fails requests (a refused or
    # timed-out connect) within fail_timeout_s is left out for fail_timeout_s (nginx's
    # server parameters); 0: every replica always tried
    max_fails: int = 0
    fail_timeout_s: float = 10.0
    # shadow: a mirrored request's whole answer is read, as Envoy's mirroring reads it;
    # false: nginx's mirror alone, which reads only the headers of each mirrored answer
    # and closes it (a streaming engine aborts it at once: ingress-nginx's mirror-target)
    mirror_reads_answers: bool = True

    def validate(self) -> None:
        if self.balance not in ("round_robin", "least_conn"):
            raise ValueError(f"balance must be round_robin or least_conn, not {self.balance!r}")
        if self.connect_timeout_s <= 0 or self.max_fails < 0 or self.fail_timeout_s <= 0:
            raise ValueError(
                "connect_timeout_s and fail_timeout_s must be above 0 and max_fails at least 0"
            )


@dataclass
class Autoscaler:
    # none; rate: idle means no queue and a low request rate (the unsafe signal);
    # inflight: idle means no running sequences (num_requests_running == 0)
    policy: str = "none"
    idle_s: float = 2.0
    period_s: float = 0.25
    min_replicas: int = 0
    rate_threshold_rps: float = 0.5

    def validate(self) -> None:
        if self.policy not in ("none", "rate", "inflight"):
            raise ValueError(f"policy must be none, rate or inflight, not {self.policy!r}")


@dataclass
class PhaseBudget:
    """The share of requests allowed over an SLO, per phase of the scenario."""

    before: float = 0.01
    during: float = 0.05
    after: float = 0.01

    def validate(self) -> None:
        for phase in ("before", "during", "after"):
            value = getattr(self, phase)
            if not 0 <= value <= 1:
                raise ValueError(f"{phase}: a budget is a share from 0 to 1, got {value}")

    def as_dict(self) -> dict[str, float]:
        return {"before": self.before, "during": self.during, "after": self.after}


@dataclass
class Slo:
    ttft_s: float = 2.0
    itl_s: float | None = None
    stall_timeout_s: float = 10.0  # no data event for this long: the stream is hung
    # an SSE event or line over this makes the stream not_sse ("event over N bytes"),
    # unkept: memory per stream stays bounded whatever a server sends
    max_event_bytes: int = MAX_EVENT_BYTES
    ttft_budget: PhaseBudget = field(default_factory=PhaseBudget)
    itl_budget: PhaseBudget = field(default_factory=PhaseBudget)
    # the load generator's own delay (its event loop's lateness, p99 in a phase) may be at
    # most this share of the ITL SLO (and of the TTFT SLO): past it, a latency budget the
    # run breaks is the client's as much as the engine's, and is not judged (client_kept_up)
    client_delay_share: float = 0.25
    # measure an engine before the session's first scenario and judge TTFT by what this
    # machine can do (harness/calibration.py): auto (real engines on the local target),
    # always (any engine, any target: real vLLM pods on kube-local's CPUs), never
    # ("on"/"off" would read as YAML booleans)
    calibrate: str = "auto"

    def validate(self) -> None:
        if self.calibrate not in ("auto", "always", "never"):
            raise ValueError(f"calibrate must be auto, always or never, not {self.calibrate!r}")
        for key in ("ttft_s", "itl_s", "stall_timeout_s"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                raise ValueError(f"{key}: an SLO must be above zero, got {value}")
        if not 0 < self.client_delay_share <= 1:
            raise ValueError(
                f"client_delay_share: a share above 0 and at most 1, got {self.client_delay_share}"
            )
        problem = event_limit_problem(self.max_event_bytes)
        if problem:
            raise ValueError(f"max_event_bytes {problem}")


@dataclass
class ScenarioTiming:
    warmup_s: float = 1.0  # steady load before acting
    in_flight: int = 2  # streams that must be running on the victim before acting
    cool_down_s: float = 2.0  # load after recovery
    # scale_up: load after the replicas' queues clear (their gauges say so): TTFT settles
    # only once the replica that took the step has worked off its queue (a round-robin
    # gateway keeps sending it a share), and the check needs full windows after that
    step_cool_down_s: float = 4.0
    recovery_s: float = 30.0  # longest wait for the target to recover
    # longest wait, before a scenario, for the target's replicas to be ready and served
    # (engine start-up: seconds for the simulator, minutes for a GPU pod loading weights)
    settle_s: float = 60.0
    # 0: settle_s and recovery_s are fixed bounds. N: waits for engines to start follow
    # their progress (the local target: each starting engine's log) and fail after N s
    # without any, up to settle_s in all (a recovery too, though recovery_s stays the
    # budget recovery_time judges): real engines start in minutes, slower on a busy machine
    startup_stall_s: float = 0.0
    # short answers sent to each ready engine directly before the steady state: a real
    # engine compiles on its first requests, which are not the steady state's TTFT
    warm_requests: int = 0
    # the engines as a third witness: every pod's /metrics read this often through the run
    # (request_success_total by finished_reason, running and waiting); 0: not read. Its
    # counters add up between reads; on a cluster each read goes through the API server
    engine_poll_s: float = 2.0
    # longest wait for the steady state (streams in flight on the victim, by the harness's
    # records and the engine's metrics); past it the run is inconclusive
    steady_state_s: float = 60.0
    # nginx logs a request when its connection closes: how long to wait for the run's
    # last request to appear in the access log before judging
    gateway_log_wait_s: float = 5.0
    # drain: how long an eviction the PodDisruptionBudget refuses is retried (429s) before
    # the run is inconclusive (a node drain retries each of its pods this long)
    eviction_retry_s: float = 30.0
    kill_signal: str = "SIGKILL"  # pod_kill: SIGKILL (OOM, crash) or SIGSTOP (a frozen node)
    # oom_kill: the context (prompt tokens) of the one request sent to the victim's engine
    # directly, which its memory limit must not hold (the simulator holds
    # memory_mb_per_1k_tokens for each 1000)
    oom_context_tokens: int = 400_000
    # oom_kill: how many times that request is sent again once the engine it killed serves
    # again, as a client retries a request that got no answer; a request that kills every
    # engine it reaches is a crash loop of one request (0: sent once)
    oom_retries: int = 0
    # preemption: how long the preemptor holds the victim's accelerators (the victim's
    # replacement waits Pending meanwhile) before it leaves
    preemption_hold_s: float = 10.0
    # node_loss: how long after the loss the gateway may still send new requests to the
    # lost node's pods (each waits for a connection that never comes, or is retried)
    lost_node_routing_s: float = 10.0
    step_users: int = 10  # scale_up: users after the load step
    hpa_target_in_flight: float = 3.0  # scale_up: the HPA's target in-flight requests per replica
    # how long the scaler takes to see a change (its metrics scrape and its polling): scale_up
    # waits this before its HPA arithmetic; the cluster's own scaler is handed the count
    # this long after the state it must see
    hpa_sync_s: float = 1.0
    # startup: the new version's start-up (weights loading; the simulator's startup_s; 0:
    # the new image's own, on a real cluster), and how many restarts of its first pod
    # show a crash loop (then it is rolled back)
    startup_version_s: float = 4.0
    startup_restarts: int = 2

    def validate(self) -> None:
        import signal

        if self.kill_signal not in signal.Signals.__members__:
            raise ValueError(f"kill_signal: {self.kill_signal!r} is not a signal name like SIGKILL")


# what kube.kill_command's items may name
KILL_FIELDS = dict.fromkeys(("namespace", "pod", "container", "container_id", "node", "signal"), "")


@dataclass
class Kube:
    kubeconfig: str | None = None
    context: str | None = None
    namespace: str = "default"
    deployment: str = "rollcheck-sim"
    selector: str | None = None
    gateway_url: str | None = None
    gateway_log_files: list[str] = field(default_factory=list)
    # or stream them from the ingress controller's pods: namespace and label selector
    gateway_pods_namespace: str = "ingress-nginx"
    gateway_pods_selector: str | None = None  # e.g. app.kubernetes.io/name=ingress-nginx
    allow_node_drain: bool = False  # cordon + evict touches a node other workloads share
    # preemption: a pod of a higher PriorityClass (made for the run) takes every free
    # accelerator on the victim's node: it may preempt any pod there of the engine's
    # priority or lower, so opt in
    allow_preemption: bool = False
    # the preemptor's image: it only holds the accelerators (kube-local: its own pause)
    preemptor_image: str = "registry.k8s.io/pause:3.10"
    dry_run: bool = False  # print every action instead of taking it
    image: str | None = None  # rollout image, "{version}" replaced, e.g. vllm/vllm-openai:{version}
    # who decides the replica count in the scale scenarios: cluster (the Deployment's own
    # HPA or KEDA ScaledObject: the scenario hands the count to it and observes what it
    # decides), or harness (rollcheck plays the scaler: scale_to_zero sets the autoscaler's
    # minimum, scale_up applies the HPA formula, scale_down removes the replica that
    # autoscaler.policy picks). The local target has no scaler of its own: harness there.
    scaler: str = "cluster"
    # how engine /metrics and /health are read: direct (pod IPs, from inside the cluster),
    # proxy (the API server's pods proxy, RBAC pods/proxy get), auto (direct in a pod, else
    # proxy, each falling back to the other)
    pod_access: str = "auto"
    # the engine container by name; unset: the one the Service's targetPort names, else
    # the one running a known engine image or command (a sidecar may be listed first)
    container: str | None = None
    # the gateway pods' container whose log holds the access lines; unset: the one whose
    # recent log does (Envoy Gateway's pods also run shutdown-manager)
    gateway_pods_container: str | None = None
    # a Deployment another controller owns (an operator, Argo CD, Flux) reverts every
    # change mid-run: refused unless this is set, then acted on with a WARNING
    allow_owned: bool = False
    # follow each engine pod's log (its engine container) into the run folder, so that a
    # stream no gateway log traces is traced by the pod whose engine logged its id (vLLM's
    # --enable-log-requests): auto (when no gateway log is given), always, never
    engine_logs: str = "auto"
    # how pod_kill kills an engine on a cluster. command: kube.kill_command, run on this
    # machine, SIGKILLs the engine container's process through its node's runtime (as
    # Chaos Mesh's container-kill does); the kubelet restarts it in place. delete: a
    # deletion with grace 0, which the kubelet turns into SIGTERM and, 2 s later,
    # SIGKILL: a 2 s drain, not a kill (named so in the report)
    pod_kill: str = "command"
    # argv, each item formatted with {namespace} {pod} {container} {container_id} (the
    # runtime's id, without "containerd://") {node} {signal} (SIGKILL); e.g. a command
    # that runs `crictl stop --timeout 0 {container_id}` on {node}. `rollcheck
    # kube-local` prints its own. Unset with pod_kill: command, pod_kill is SKIPPED.
    kill_command: list[str] = field(default_factory=list)

    # node_loss: argv that stops a node as a power loss would (no RST, its kubelet silent)
    # and argv that brings it back, each item formatted with {node}: a cloud CLI, IPMI, a
    # script of yours. `rollcheck kube-local` prints its own. Unset: node_loss is SKIPPED
    node_loss_command: list[str] = field(default_factory=list)
    node_return_command: list[str] = field(default_factory=list)
    # weighted_canary and shadow on a cluster: the Gateway API HTTPRoute the gateway serves
    # the model by (in kube.namespace), the rule (its index) whose backendRefs name the
    # stable and the candidate Service; rollcheck changes only that rule's weights for
    # those two backends and its RequestMirror filter, and puts them back
    route: str | None = None
    route_rule: int = 0
    stable_service: str | None = None
    candidate_service: str | None = None
    # how long after the route's status says Accepted the gateway's proxies may still route
    # by the old weights (the status is the control plane's word; the data plane follows:
    # Traefik holds a new configuration up to its providersThrottleDuration, 2 s by
    # default; measured on kube-local: the old weights 1.6 s after Accepted). A weight
    # counts as applied this long after it was accepted
    route_settle_s: float = 3.0
    # shadow: your gateway implements the HTTPRoute RequestMirror filter, where rollcheck
    # cannot read it from its GatewayClass (status.supportedFeatures unlisted, or RBAC
    # refusing to read the Gateway or the class). A gateway whose class lists its features
    # without HTTPRouteRequestMirror is never sent a mirror, whatever this says
    gateway_mirrors: bool = False
    # pd_rollout on a cluster: the prefill role's Deployment of a prefill/decode deployment
    # (the decode role is kube.deployment, the one the gateway routes to)
    pd_prefill_deployment: str | None = None

    def validate(self) -> None:
        if self.gateway_url and (problem := url_problem(self.gateway_url)):
            raise ValueError(f"kube.gateway_url: {problem}")
        if self.route and not (self.stable_service and self.candidate_service):
            raise ValueError(
                "kube.route needs kube.stable_service and kube.candidate_service: the two "
                "Services its rule's backendRefs name"
            )
        if self.route_rule < 0:
            raise ValueError(f"kube.route_rule is an index, at least 0, not {self.route_rule}")
        if self.route_settle_s < 0:
            raise ValueError(
                f"kube.route_settle_s is seconds, at least 0, not {self.route_settle_s}"
            )
        for key in ("node_loss_command", "node_return_command"):
            for arg in getattr(self, key):
                try:
                    arg.format(node="")
                except (KeyError, IndexError, ValueError) as exc:
                    raise ValueError(
                        f"kube.{key}: {arg!r} names {exc}; the one field is {{node}}"
                    ) from None
        if self.pod_kill not in ("command", "delete"):
            raise ValueError("kube.pod_kill must be command or delete")
        for arg in self.kill_command:
            try:
                arg.format(**KILL_FIELDS)
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(
                    f"kube.kill_command: {arg!r} names {exc}; the fields are "
                    + ", ".join("{" + k + "}" for k in KILL_FIELDS)
                ) from None
        if self.engine_logs not in ("auto", "always", "never"):
            raise ValueError("kube.engine_logs must be auto, always or never")
        if self.scaler not in ("cluster", "harness"):
            raise ValueError("kube.scaler must be cluster or harness")
        if self.pod_access not in ("auto", "direct", "proxy"):
            raise ValueError("kube.pod_access must be auto, direct or proxy")


@dataclass
class Canary:
    """The canary scenario: one replica of a new version, its answers compared with the
    baseline's on golden prompts (rollcheck canary), promoted if they agree, rolled back
    if not."""

    version: str = ""  # the canary's version (default: next_version)
    # same: the same weights under a new engine (token for token); new: new weights
    mode: str = "same"
    min_agreement: float = 0.9  # same mode: share of answers that must be identical
    # same mode: an answer identical for its first N tokens agrees too (0: identical only).
    # An engine whose greedy decoding is not batch-invariant (real vLLM on CPU) flips a
    # near-tie token late when the two sides were asked in other batches; other weights
    # differ from the first token (docs/facts.md)
    agree_after_tokens: int = 0
    prompts: str | None = None  # JSON lines (rollcheck canary --prompts); default: shipped set
    # the candidate's engine settings over the baseline's, e.g. {degraded: true}
    engine: dict = field(default_factory=dict)
    ready_s: float = 60.0  # longest wait for the canary replica to be ready

    def validate(self) -> None:
        from harness.canary import MODES

        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if not 0 <= self.min_agreement <= 1:
            raise ValueError(f"min_agreement must be between 0 and 1, not {self.min_agreement}")
        if self.agree_after_tokens < 0:
            raise ValueError(f"agree_after_tokens: at least 0, not {self.agree_after_tokens}")
        _engine_keys(self.engine, "engine")
        _golden_prompts(self.prompts)


def _engine_keys(changes: dict, key: str) -> None:
    """Engine settings given as changes over the engine's: each key one of its fields."""
    known = {f.name for f in dataclasses.fields(EngineSettings)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise ValueError(f"{key}.{unknown[0]} is not an engine setting (rollcheck sim --help)")


def _golden_prompts(path: str | None) -> None:
    from harness.canary import CanaryInputError, load_prompts

    try:
        load_prompts(path)
    except CanaryInputError as exc:
        raise ValueError(f"prompts: {exc}") from None


@dataclass
class AdapterRollout:
    """adapter_rollout: a LoRA adapter moved from one version to the next under load, as
    llm-d's adapter rollout guide does it: the new version loaded on every replica under a
    name of its own, the load's requests moved to it by weight, the old one unloaded."""

    name: str = "support"
    path: str = "/adapters/support"  # each version's weights: <path>/<version>
    from_version: str = "v1"
    to_version: str = "v2"
    # versioned names (support-v1, support-v2); false: the new version is reloaded in
    # place under the one name (load_inplace), which an engine may keep serving old
    # weights under
    versioned: bool = True
    share: float = 0.5  # of the load's requests, the ones that name the adapter
    steps: list[int] = field(default_factory=lambda: [10, 50, 100])  # % moved, step by step
    step_s: float = 2.0  # each step observed this long before the next
    prompts: str | None = None  # golden prompts (JSON lines); default: the canary's set
    golden_prompts: int = 3  # of them, the first N, asked of every replica per version

    def names(self) -> tuple[str, str]:
        """The names the old and the new version are served under."""
        if not self.versioned:
            return self.name, self.name
        return f"{self.name}-{self.from_version}", f"{self.name}-{self.to_version}"

    def path_of(self, version: str) -> str:
        return f"{self.path.rstrip('/')}/{version}"

    def validate(self) -> None:
        if not self.name or self.from_version == self.to_version:
            raise ValueError("needs a name and two different versions (from_version, to_version)")
        if not 0 < self.share <= 1:
            raise ValueError(f"share must be above 0 and at most 1, not {self.share:g}")
        if not self.steps or any(not 0 < p <= 100 for p in self.steps):
            raise ValueError(f"steps: percentages above 0 and at most 100, not {self.steps}")
        if self.steps != sorted(set(self.steps)):
            raise ValueError(f"steps must rise, each once: {self.steps}")
        if self.golden_prompts < 1:
            raise ValueError("golden_prompts: at least 1")


def _golden(section) -> None:
    """A section's golden prompts and candidate engine, held as the canary's are."""
    Canary(
        version=section.version,
        mode=section.mode,
        min_agreement=section.min_agreement,
        agree_after_tokens=section.agree_after_tokens,
        prompts=section.prompts,
        engine=section.engine,
    ).validate()


@dataclass
class WeightedCanary:
    """weighted_canary: a candidate version given a share of the traffic at the gateway in
    steps, each step observed before the next; any step that fails rolls back (weight 0,
    the candidate removed), the last that passes promotes (the rollout goes on)."""

    version: str = ""  # the candidate's version (default: next_version)
    # the candidate's engine settings over the baseline's, e.g. {ttft_s: 0.15}
    engine: dict = field(default_factory=dict)
    steps: list[float] = field(default_factory=lambda: [10.0, 50.0, 100.0])  # % of requests
    step_s: float = 10.0  # each step observed at least this long
    # and on, until the step holds min_samples / weight streams and min_samples of them
    # are the candidate's, up to this long (then the step cannot tell, and rolls back)
    step_max_s: float = 120.0
    min_samples: int = 20  # each version's streams a step compares, at the least
    # the golden prompts, asked of the candidate and of a baseline replica directly before
    # any traffic moves (as the canary scenario asks them)
    mode: str = "same"
    min_agreement: float = 0.9
    agree_after_tokens: int = 0  # as canary's
    prompts: str | None = None
    ready_s: float = 60.0  # longest wait for the candidate's replicas to be ready
    # the stable backend's Service selects the app's pods by their app label alone, so it
    # holds the candidate's pods too: the candidate serves more than its weight (local
    # target: the misconfiguration the split check exists for)
    stable_selects_candidate: bool = False

    def validate(self) -> None:
        if not self.steps or any(not 0 < p <= 100 for p in self.steps):
            raise ValueError(f"steps: percentages above 0 and at most 100, not {self.steps}")
        if self.steps != sorted(set(self.steps)):
            raise ValueError(f"steps must rise, each once: {self.steps}")
        if self.step_s <= 0 or self.step_max_s < self.step_s:
            raise ValueError(
                f"step_s must be above 0 and step_max_s at least step_s "
                f"({self.step_s:g}, {self.step_max_s:g})"
            )
        if self.min_samples < 5:
            raise ValueError(f"min_samples: at least 5, not {self.min_samples}")
        _golden(self)


@dataclass
class Shadow:
    """shadow: the gateway copies a share of the requests to a candidate and discards its
    answers, for a window; the candidate judged by what it did with them (its engine's own
    counters and latency histograms against the baseline's), never by a user."""

    version: str = ""  # the candidate's version (default: next_version)
    engine: dict = field(default_factory=dict)  # its engine settings over the baseline's
    percent: float = 100.0  # of the requests, mirrored to the candidate
    window_s: float = 10.0  # how long the requests are mirrored, at the least
    # observations each side's TTFT histogram needs in the window to be compared
    min_samples: int = 20
    # and on, while either side has fewer than min_samples, up to this long (then the
    # latency cannot tell)
    window_max_s: float = 120.0
    idle_s: float = 30.0  # longest wait for the candidate to finish what was mirrored
    mode: str = "same"  # the golden prompts, asked of the candidate directly (as canary)
    min_agreement: float = 0.9
    agree_after_tokens: int = 0
    prompts: str | None = None
    ready_s: float = 60.0
    # the Service users reach selects the candidate's pods too (by app label alone): the
    # candidate answers users (local target: the misconfiguration shadow_not_leaked catches)
    stable_selects_candidate: bool = False

    def validate(self) -> None:
        if not 0 < self.percent <= 100:
            raise ValueError(f"percent: above 0 and at most 100, not {self.percent:g}")
        if self.window_s <= 0 or self.idle_s <= 0:
            raise ValueError("window_s and idle_s must be above 0")
        if self.window_max_s < self.window_s:
            raise ValueError(
                f"window_max_s must be at least window_s ({self.window_max_s:g}, {self.window_s:g})"
            )
        if self.min_samples < 5:
            raise ValueError(f"min_samples: at least 5, not {self.min_samples}")
        _golden(self)


@dataclass
class PD:
    """Prefill/decode disaggregation: the deployment serves in two roles. The gateway
    routes to the decode Deployment (kube.deployment, `replicas`); each decode pod's
    routing sidecar asks the prefill Service for the prompt's KV (harness/sim/pd.py). The
    engines' own P/D settings are engine.pd_* (the handshake's factors, what a KV that
    cannot be read does)."""

    prefill_replicas: int = 2
    # the prefill role's engine settings over the engine's, e.g. {ttft_s: 0.3}: a prefill
    # of a long prompt takes its time, and decode pods wait on it meanwhile
    prefill_engine: dict = field(default_factory=dict)
    # the prefill role's PodDisruptionBudget (its own Deployment's); default: none
    prefill_pdb: PDB = field(default_factory=PDB)
    zero_s: float = 2.0  # pd_prefill[to_zero]: the prefill role held at zero this long

    def validate(self) -> None:
        if self.prefill_replicas < 1:
            raise ValueError(f"prefill_replicas: at least 1, not {self.prefill_replicas}")
        if self.zero_s < 0:
            raise ValueError(f"zero_s: at least 0, not {self.zero_s:g}")
        _engine_keys(self.prefill_engine, "prefill_engine")


@dataclass
class PDRollout:
    """pd_rollout: a new version (new weights of the same shape) rolled across both roles
    under load, in one of the orders users roll them (the scenario's parameter), while
    greedy golden prompts go through the gateway; an answer that is neither version's own
    was built from both."""

    version: str = ""  # the new version (default: next_version)
    # the new version's engine settings over the old's, on both roles (on a cluster, with
    # kube.image's tag: e.g. {model_version: v2} for rollcheck's simulator)
    engine: dict = field(default_factory=dict)
    prompts: str | None = None  # the golden prompts (default: the canary's built-in set)
    # prefill_first and decode_first: how long the first role's rollout may take, then the
    # second's (the roles' own Deployments' strategies roll them)
    role_s: float = 60.0
    # the golden prompts go on this long after the last role's rollout, and are asked of
    # the new version's pair after it
    after_s: float = 2.0

    def validate(self) -> None:
        if self.role_s <= 0 or self.after_s < 0:
            raise ValueError("role_s must be above 0 and after_s at least 0")
        _engine_keys(self.engine, "engine")
        _golden_prompts(self.prompts)


@dataclass
class Ui:
    """What a run prints while it runs (harness.progress)."""

    # a scenario's phase lines on the terminal (pytest's live logging prints them when it is
    # on; they are in the captured log either way); false: the captured log only
    phase_lines: bool = True
    # off a terminal (CI logs, kubectl logs), the status of a wait as a plain line this often;
    # on a terminal it is one line rewritten in place; 0: never
    progress_every_s: float = 30.0
    # a pod's start-up (scheduling, image, weights), for the session's time estimate only;
    # default: engine.startup_s (the simulator's). On a GPU cluster: minutes
    pod_startup_s: float | None = None

    def validate(self) -> None:
        if self.progress_every_s < 0:
            raise ValueError(f"progress_every_s cannot be negative ({self.progress_every_s:g})")


@dataclass
class RunConfig:
    replicas: int = 3
    nodes: int = 2
    gpus_per_node: int = 0  # 0 = unlimited
    # the local control plane's node-monitor-grace-period: how long a node's kubelet may
    # be silent before the node is marked (Ready Unknown, the unreachable taint, its pods
    # not ready); Kubernetes' is 50 s (40 s before 1.32)
    node_monitor_grace_s: float = 50.0
    version: str = "v1"  # the version running before a scenario (the baseline)
    # the version rollouts go to; with kube.image=repo:{version} it is the image tag the
    # rollout sets (e.g. version v0.11.0, next_version v0.12.0: an engine upgrade)
    next_version: str = "v2"
    engine: EngineSettings = field(default_factory=EngineSettings)
    pod: PodSettings = field(default_factory=PodSettings)
    strategy: Strategy = field(default_factory=Strategy)
    pdb: PDB = field(default_factory=PDB)
    gateway: Gateway = field(default_factory=Gateway)
    autoscaler: Autoscaler = field(default_factory=Autoscaler)
    load: LoadSettings = field(default_factory=LoadSettings)
    slo: Slo = field(default_factory=Slo)
    scenario: ScenarioTiming = field(default_factory=ScenarioTiming)
    kube: Kube = field(default_factory=Kube)
    canary: Canary = field(default_factory=Canary)
    adapter: AdapterRollout = field(default_factory=AdapterRollout)
    weighted_canary: WeightedCanary = field(default_factory=WeightedCanary)
    shadow: Shadow = field(default_factory=Shadow)
    pd: PD = field(default_factory=PD)
    pd_rollout: PDRollout = field(default_factory=PDRollout)
    ui: Ui = field(default_factory=Ui)

    def validate(self) -> None:
        if self.replicas < 0 or self.nodes < 1:
            raise ValueError("replicas must be >= 0 and nodes >= 1")
        if self.node_monitor_grace_s <= 0 or self.pod.unreachable_toleration_s < 0:
            raise ValueError(
                "node_monitor_grace_s must be above 0 and pod.unreachable_toleration_s at least 0"
            )
        if self.load.stop_timeout_s < self.slo.stall_timeout_s:
            # a stream silent at stop must have had the time to be judged hung
            raise ValueError(
                f"load.stop_timeout_s ({self.load.stop_timeout_s:g}) is below "
                f"slo.stall_timeout_s ({self.slo.stall_timeout_s:g}): raise load.stop_timeout_s "
                "to at least the stall timeout"
            )
        if self.load.step_at_s <= self.scenario.warmup_s:
            # scale_up judges the step against the steady state before it
            raise ValueError(
                f"load.step_at_s ({self.load.step_at_s:g}) is inside scenario.warmup_s "
                f"({self.scenario.warmup_s:g}): scale_up's load step would come before the "
                "steady state, and its own queueing be judged as the steady state's; set "
                "load.step_at_s above scenario.warmup_s (with time for the streams in flight)"
            )


def load_config(path: Path | None = None, sets: list[str] | None = None) -> RunConfig:
    """The config file (default rollcheck.yaml at the repo root) with --set overrides."""
    if path is None and DEFAULT_CONFIG.exists():
        path = DEFAULT_CONFIG
    data = load_yaml(path) if path is not None else {}
    _renamed(apply_sets(data, sets or []), path, sets or [])
    engine = apply_sets(data, sets or []).get("engine") or {}
    kind = engine.get("kind") if isinstance(engine, dict) else None  # build() names the error
    if kind in KINDS:
        data = _merged(data, KINDS[kind].config_defaults)
    data = apply_sets(data, sets or [])
    try:
        return build(RunConfig, data)
    except ConfigError as exc:
        culprit = _culprit(str(exc), sets or [])
        where = f"--set {said_set(culprit)}" if culprit else str(path) if path else "config"
        raise ConfigError(f"{where}: {exc}") from None


RENAMED = {
    ("kube", "scale_to_zero"): "kube.scale_to_zero was replaced by kube.scaler: force is "
    "kube.scaler=harness (rollcheck sets the count), wait is kube.scaler=cluster (the "
    "Deployment's own HPA or ScaledObject decides, the default)",
}


def _renamed(data: dict, path: Path | None, sets: list[str]) -> None:
    """One line for a setting that was renamed, naming its successor."""
    for (section, key), message in RENAMED.items():
        part = data.get(section)
        if isinstance(part, dict) and key in part:
            given = [s for s in sets if s.split("=", 1)[0].strip() == f"{section}.{key}"]
            where = f"--set {said_set(given[-1])}" if given else str(path) if path else "config"
            raise ConfigError(f"{where}: {message}")


def _culprit(message: str, sets: list[str]) -> str | None:
    """The --set a config error is about, when the error names its key (or a parent)."""
    for s in reversed(sets):  # the last --set of a key wins, so it is the one to blame
        parts = s.split("=", 1)[0].strip().split(".")
        for i in range(len(parts), 0, -1):
            key = ".".join(parts[:i])
            if message.startswith(key + ":") or f"'{key}'" in message or f"{key} (" in message:
                return s
    return None


def _merged(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out
