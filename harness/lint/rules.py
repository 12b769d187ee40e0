"""lint's rules, one function each: a rule takes one inference Deployment (`Deployment`:
its pod, engine container, grace period, shutdown timeout, preStop, and the objects that go
with it) and yields its findings, made by `Deployment.finding`. `RULES` lists them with id,
severity and a one-line summary; `rollcheck lint --rules` prints it.

To add a rule: write a function below under `@rule(...)` with the next free id. Each rule
states why (how vLLM, nginx or Kubernetes behave) and how to fix it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

from harness import rollout_math
from harness.lint.manifests import (
    NGINX_ANNOTATION,
    Index,
    LintInputError,
    Manifest,
    _ingress_services,
    _targets,
    int_or_percent,
    pod_spec,
)
from harness.podspec import (
    DEFAULT_GRACE_S,
    ENGINE_COMMANDS,
    ENGINE_IMAGES,
    memory_gib,
    number,
    prestop_sleep_s,
    probe_window_s,
    runs_engine,
    shutdown_timeout_s,
)

SEVERITIES = ("info", "warning", "error")
GPU_UTIL = re.compile(
    r"DCGM_FI_DEV_GPU_UTIL|gpu_util|nvidia_gpu_duty_cycle|gpu_utilization", re.IGNORECASE
)
IN_FLIGHT = re.compile(r"num_requests_running|num_running_reqs", re.IGNORECASE)
SHELLS = re.compile(r"(^|/)(sh|bash|dash|ash|zsh)$")
COMPOUND = re.compile(r"[;&|\n`]|\$\(")  # more than one simple command in a shell script
NGINX_DEFAULT_TIMEOUT_S = 60  # ingress-nginx proxy-read-timeout / proxy-send-timeout
# Caps on the grace period that some node operations honour, whatever the pod asks for.
GRACE_CAPS = (
    (3600, "GKE node upgrades honour terminationGracePeriodSeconds for at most one hour"),
    (600, "cluster-autoscaler's scale-down waits at most --max-graceful-termination-sec (600 s)"),
)


@dataclass
class Finding:
    rule: str
    severity: str
    object: str
    path: str
    why: str
    fix: str
    file: str = ""
    line: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class LintOptions:
    engine_images: list[str] = field(default_factory=lambda: list(ENGINE_IMAGES))
    engine_commands: list[str] = field(default_factory=lambda: list(ENGINE_COMMANDS))
    min_startup_s: float = 600.0  # weight loading on a GPU node takes minutes
    # the longest time an answer may send nothing: a queued request gets its headers and
    # then no byte until admitted; a long prompt's prefill sends nothing either
    longest_silence_s: float = 120.0
    longest_answer_s: float | None = None  # the longest answer the service must finish
    gpu_quota: int | None = None  # nvidia.com/gpu the namespace may use
    # the engine container by name (the Kubernetes target's choice for a live Deployment:
    # a sidecar may be listed first); None: the first that runs a known engine
    engine_name: str | None = None


def engine_container(m: Manifest, opts: LintOptions) -> tuple[int, dict] | None:
    for i, c in enumerate(pod_spec(m).get("containers") or []):
        if opts.engine_name is not None:
            if c.get("name") == opts.engine_name:
                return i, c
        elif runs_engine(c, opts.engine_images, opts.engine_commands):
            return i, c
    return None


def strategy(m: Manifest) -> tuple[int, int]:
    replicas = int((m.obj.get("spec") or {}).get("replicas", 1))
    ru = ((m.obj.get("spec") or {}).get("strategy") or {}).get("rollingUpdate") or {}
    surge, unavailable = ru.get("maxSurge", "25%"), ru.get("maxUnavailable", "25%")
    int_or_percent(surge, m.ref)  # the strict message for a bad value
    int_or_percent(unavailable, m.ref)
    return rollout_math.resolve(surge, unavailable, replicas)


def shell_wrapper(c: dict, opts: LintOptions) -> tuple[str, str] | None:
    """How a shell stands between the kubelet's SIGTERM and the engine, if it does:
    ("compound", script), ("simple", script) or ("script", path)."""
    argv = [str(x) for x in (c.get("command") or []) + (c.get("args") or [])]
    if not argv:
        return None
    if SHELLS.search(argv[0]) and len(argv) > 2 and re.fullmatch(r"-[a-z]*c[a-z]*", argv[1]):
        script = argv[2]
        engine = next((m for p in opts.engine_commands if (m := re.search(p, script))), None)
        if engine is None:
            return None
        before = script[: engine.start()]
        if re.search(r"(^|[;&|\n]\s*|\s)exec\s+(env\s+)?(\S+=\S+\s+)*$", before):
            return None  # `exec vllm serve ...`: the engine replaces the shell
        return ("compound" if COMPOUND.search(script) else "simple", script)
    script = argv[1] if SHELLS.search(argv[0]) and len(argv) > 1 else argv[0]
    if script.endswith(".sh"):
        return ("script", script)
    return None


def seconds_annotation(m: Manifest, key: str) -> float | None:
    value = ((m.obj.get("metadata") or {}).get("annotations") or {}).get(key)
    if value is None:
        return None
    n = number(str(value).strip().removesuffix("s"))
    if n is None or n < 0:
        raise LintInputError(
            f"{m.file}: document {m.doc} ({m.ref}): metadata.annotations.{key} {value!r} is "
            "not a number of seconds"
        )
    return n


@dataclass(frozen=True)
class Deployment:
    """One inference Deployment as every rule sees it: read once, before the rules run."""

    m: Manifest
    idx: int  # the engine container's index in the pod
    c: dict  # the engine container
    pod: dict  # spec.template.spec
    replicas: int
    grace: float  # terminationGracePeriodSeconds (30 when unset)
    timeout: float | None  # the engine's --shutdown-timeout
    prestop: float | None  # the engine container's preStop sleep
    labels: dict  # the pod template's labels
    index: Index  # the objects beside it (PDBs, Services, autoscalers, Ingresses)
    opts: LintOptions

    @classmethod
    def read(cls, m: Manifest, idx: int, c: dict, index: Index, opts: LintOptions):
        pod = pod_spec(m)
        template = (m.obj.get("spec") or {}).get("template") or {}
        return cls(
            m=m,
            idx=idx,
            c=c,
            pod=pod,
            replicas=int((m.obj.get("spec") or {}).get("replicas", 1)),
            grace=float(pod.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)),
            timeout=shutdown_timeout_s(c),
            prestop=prestop_sleep_s(c),
            labels=(template.get("metadata") or {}).get("labels") or {},
            index=index,
            opts=opts,
        )

    @property
    def cpath(self) -> str:
        return f"spec.template.spec.containers[{self.idx}]"

    @property
    def ns(self) -> str:
        return self.m.namespace

    def finding(
        self, rule: str, severity: str, path: str, why: str, fix: str, on: Manifest | None = None
    ) -> Finding:
        """A finding of `rule` at `path` in the Deployment, or in `on` (its PDB, autoscaler
        or Ingress)."""
        at = on or self.m
        return Finding(rule, severity, at.ref, path, why, fix, at.file, at.line)

    def autoscalers(self, kind: str) -> list[Manifest]:
        found = self.index.targeting(self.ns, kind, self.m.name)
        return [a for a in found if _targets(a.obj, self.m)]


Check = Callable[[Deployment], Iterator[Finding]]


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str  # the most severe it reports
    summary: str
    check: Check


RULES: list[Rule] = []


def rule(id: str, severity: str, summary: str) -> Callable[[Check], Check]:
    """Register a rule function under its id (in the order the rules run)."""

    def register(check: Check) -> Check:
        assert id not in {r.id for r in RULES}, id
        RULES.append(Rule(id, severity, summary, check))
        return check

    return register


# --- the rules -------------------------------------------------------------------------
@rule("RC001", "error", "the engine container has a startupProbe")
def no_startup_probe(d: Deployment) -> Iterator[Finding]:
    if not d.c.get("startupProbe"):
        yield d.finding(
            "RC001",
            "error",
            f"{d.cpath}.startupProbe",
            "no startupProbe: liveness and readiness probes run while weights load (minutes), "
            "and a liveness failure restarts the engine before it ever serves",
            "add a startupProbe on /health with failureThreshold x periodSeconds above the "
            "longest weight-loading time",
        )


@rule("RC002", "warning", "the startupProbe's window covers weight loading")
def short_startup_window(d: Deployment) -> Iterator[Finding]:
    window = probe_window_s(d.c.get("startupProbe"))
    if window is not None and window < d.opts.min_startup_s:
        yield d.finding(
            "RC002",
            "warning",
            f"{d.cpath}.startupProbe",
            f"the startupProbe allows {window:g} s to start, less than "
            f"{d.opts.min_startup_s:g} s expected for weight loading",
            "raise failureThreshold (or periodSeconds) so the window covers the slowest start",
        )


@rule("RC003", "warning", "liveness is more lenient than readiness")
def strict_liveness(d: Deployment) -> Iterator[Finding]:
    live, ready = d.c.get("livenessProbe"), d.c.get("readinessProbe")
    if live and ready and probe_window_s(live) <= probe_window_s(ready):
        yield d.finding(
            "RC003",
            "warning",
            f"{d.cpath}.livenessProbe",
            "liveness is as strict as readiness: a busy engine that misses a few probes is "
            "restarted (losing every stream) instead of only taken out of endpoints",
            "make liveness more lenient than readiness (higher failureThreshold x periodSeconds)",
        )


@rule("RC005", "error", "the engine drains at SIGTERM (--shutdown-timeout set)")
def no_shutdown_timeout(d: Deployment) -> Iterator[Finding]:
    if not d.timeout:
        yield d.finding(
            "RC005",
            "error",
            f"{d.cpath}.args",
            "the engine's --shutdown-timeout is unset or 0: at SIGTERM vLLM aborts every "
            "in-flight request (finish_reason abort)",
            "set --shutdown-timeout to about the p99 answer time (llm-d uses 45 s)",
        )


@rule("RC006", "warning", "a preStop sleep covers endpoint propagation")
def no_prestop(d: Deployment) -> Iterator[Finding]:
    if d.prestop is None:
        yield d.finding(
            "RC006",
            "warning",
            f"{d.cpath}.lifecycle.preStop",
            "no preStop sleep: SIGTERM arrives while gateways still route to the pod, and "
            "vLLM accepts then aborts those new requests",
            "add a preStop sleep longer than endpoint propagation (llm-d and KServe use 15 s)",
        )


@rule("RC004", "error", "the grace period is above preStop + shutdown timeout")
def grace_below_drain(d: Deployment) -> Iterator[Finding]:
    prestop, timeout = d.prestop or 0, d.timeout or 0
    need = prestop + timeout
    if d.grace <= need:
        yield d.finding(
            "RC004",
            "error",
            "spec.template.spec.terminationGracePeriodSeconds",
            f"terminationGracePeriodSeconds {d.grace:g} s is not above preStop {prestop:g} s + "
            f"shutdown timeout {timeout:g} s: streams still draining are SIGKILLed",
            f"set terminationGracePeriodSeconds above {need:g} s (llm-d: preStop 15, timeout 45, "
            "grace 75)",
        )


@rule("RC012", "error", "SIGTERM reaches the engine (no shell without exec in between)")
def shell_without_exec(d: Deployment) -> Iterator[Finding]:
    wrapper = shell_wrapper(d.c, d.opts)
    if wrapper is None:
        return
    path = f"{d.cpath}.command"
    how, script = wrapper
    if how == "compound":
        yield d.finding(
            "RC012",
            "error",
            path,
            "the engine runs under a shell script of several commands without `exec`: the "
            "shell is PID 1 and takes the kubelet's SIGTERM (a shell does not pass it on), so "
            "the engine never drains and is SIGKILLed at the end of the grace period",
            "start the engine with `exec` as the script's last command (exec vllm serve ...), "
            "or put the engine in command/args directly",
        )
    elif how == "simple":
        yield d.finding(
            "RC012",
            "warning",
            path,
            f"the engine is started by `{script[:60]}` under a shell without `exec`: only "
            "a shell that happens to exec a lone command (bash does) lets SIGTERM reach it",
            "write `exec` before the engine command, or drop the shell",
        )
    else:
        yield d.finding(
            "RC012",
            "warning",
            path,
            f"the engine is started by the script {script}: SIGTERM reaches the engine "
            "only if the script ends in `exec <engine> ...`, which rollcheck cannot see",
            "end the script with `exec vllm serve ...` (or use tini/dumb-init to forward signals)",
        )


@rule("RC016", "error", "no Service named vllm injects VLLM_PORT into the engine")
def vllm_service_link(d: Deployment) -> Iterator[Finding]:
    service = d.index.service_names.get((d.ns, "vllm"))
    if service is not None and d.pod.get("enableServiceLinks", True) is not False:
        yield d.finding(
            "RC016",
            "error",
            "spec.template.spec.enableServiceLinks",
            f"the Service {service.ref} gives every pod of the namespace "
            "VLLM_PORT=tcp://<service IP>:<port> (service links), and vLLM reads VLLM_PORT "
            "as its own setting: the engine core fails to start ('VLLM_PORT ... appears to "
            "be a URI')",
            "set enableServiceLinks: false in the pod template, or name the Service "
            "otherwise than vllm",
        )


@rule("RC015", "error", "the grace period covers the longest answer and fits node operations")
def grace_vs_answers(d: Deployment) -> Iterator[Finding]:
    grace, prestop = d.grace, d.prestop or 0
    path = "spec.template.spec.terminationGracePeriodSeconds"
    if "terminationGracePeriodSeconds" in d.pod:
        cap, who = next(((cap, who) for cap, who in GRACE_CAPS if grace > cap), (None, ""))
        if cap is not None:
            yield d.finding(
                "RC015",
                "warning",
                path,
                f"terminationGracePeriodSeconds {grace:g} s is above {cap} s: {who}, so "
                "answers the grace period was meant to cover are cut there",
                f"keep answers (preStop + shutdown timeout) under {cap} s, or drain the "
                "node yourself before the operation",
            )
    longest = d.opts.longest_answer_s
    if longest is not None and grace < prestop + longest:
        yield d.finding(
            "RC015",
            "error",
            path,
            f"terminationGracePeriodSeconds {grace:g} s is below preStop {prestop:g} s + "
            f"the longest expected answer ({longest:g} s): the longest answers "
            "in flight at a drain are SIGKILLed",
            f"set terminationGracePeriodSeconds (and --shutdown-timeout) to cover "
            f"{prestop + longest:g} s",
        )


def _pdbs(d: Deployment) -> Iterator[tuple[Manifest, object, object, str]]:
    """The PDBs over the Deployment's pods: (pdb, minAvailable, maxUnavailable, where)."""
    for pdb in d.index.selecting(d.ns, "PodDisruptionBudget", d.labels):
        spec = pdb.obj.get("spec") or {}
        where = f"{pdb.file}: document {pdb.doc} ({pdb.ref})"
        min_av, max_un = spec.get("minAvailable"), spec.get("maxUnavailable")
        if max_un is not None:
            int_or_percent(max_un, f"{where}: spec.maxUnavailable")
        yield pdb, min_av, max_un, where


@rule("RC013", "error", "a PDB's minAvailable percentage does not round up to every replica")
def pdb_rounds_up(d: Deployment) -> Iterator[Finding]:
    replicas = d.replicas
    for pdb, min_av, _, where in _pdbs(d):
        if min_av is None:
            continue
        n, percent = int_or_percent(min_av, f"{where}: spec.minAvailable")
        # Kubernetes rounds a minAvailable percentage up
        if percent and 0 < n < 100 and -(-n * replicas // 100) >= replicas:
            yield d.finding(
                "RC013",
                "error",
                "spec.minAvailable",
                f"minAvailable {min_av} of {replicas} replicas rounds up to "
                f"{int(-(-n * replicas // 100))} (Kubernetes rounds it up): no pod of "
                f"{d.m.ref} may be evicted, so node drains and scale-downs block",
                f"use maxUnavailable: 1, or a percentage that leaves one replica "
                f"(at most {100 * (replicas - 1) // replicas}% of {replicas})",
                on=pdb,
            )


@rule("RC007", "error", "a PDB allows at least one voluntary disruption")
def pdb_blocks(d: Deployment) -> Iterator[Finding]:
    replicas = d.replicas
    _, unavailable = strategy(d.m)
    for pdb, min_av, max_un, _ in _pdbs(d):
        if (
            min_av == "100%"
            or (isinstance(min_av, int) and min_av >= replicas)
            or max_un in (0, "0", "0%")
        ):
            yield d.finding(
                "RC007",
                "error",
                "spec",
                f"the PDB allows no voluntary disruption of {d.m.ref} ({replicas} replicas): "
                "every node drain and autoscaler scale-down blocks on it (HTTP 429), while the "
                f"rollout itself may take {unavailable} pod(s) down",
                "allow one disruption (maxUnavailable: 1, or minAvailable: replicas - 1)",
                on=pdb,
            )


@rule("RC008", "error", "no autoscaler scales on GPU utilisation")
def scales_on_gpu_util(d: Deployment) -> Iterator[Finding]:
    for hpa in d.autoscalers("HorizontalPodAutoscaler"):
        if GPU_UTIL.search(json.dumps(hpa.obj.get("spec") or {})):
            yield d.finding(
                "RC008",
                "error",
                "spec.metrics",
                "scales on GPU utilisation: one decoding request saturates a GPU, "
                "so the signal says nothing about load",
                "scale on queue length (vllm:num_requests_waiting) or in-flight "
                "requests per replica",
                on=hpa,
            )
    for so in d.autoscalers("ScaledObject"):
        if GPU_UTIL.search(json.dumps((so.obj.get("spec") or {}).get("triggers") or [])):
            yield d.finding(
                "RC008",
                "error",
                "spec.triggers",
                "scales on GPU utilisation: one decoding request saturates a GPU",
                "scale on queue length or in-flight requests",
                on=so,
            )


@rule("RC009", "warning", "an autoscaler's scale-down wait covers the longest answer")
def short_scale_down_wait(d: Deployment) -> Iterator[Finding]:
    timeout = d.timeout
    for hpa in d.autoscalers("HorizontalPodAutoscaler"):
        behavior = (hpa.obj.get("spec") or {}).get("behavior") or {}
        window = (behavior.get("scaleDown") or {}).get("stabilizationWindowSeconds")
        if window is None or (timeout and window < timeout):
            yield d.finding(
                "RC009",
                "warning",
                "spec.behavior.scaleDown.stabilizationWindowSeconds",
                f"scale-down cooldown {window if window is not None else 'unset'} "
                f"is shorter than the engine's shutdown timeout ({timeout or 0:g} s), "
                "the expected longest answer",
                "set a scale-down stabilization window at least as long as the longest answer",
                on=hpa,
            )
    for so in d.autoscalers("ScaledObject"):
        cooldown = (so.obj.get("spec") or {}).get("cooldownPeriod", 300)
        if timeout and cooldown < timeout:
            yield d.finding(
                "RC009",
                "warning",
                "spec.cooldownPeriod",
                f"cooldownPeriod {cooldown} s is shorter than the engine's shutdown "
                f"timeout ({timeout:g} s)",
                "set cooldownPeriod at least as long as the longest answer",
                on=so,
            )


@rule("RC010", "error", "scale to zero only on in-flight sequences")
def zero_on_blind_signal(d: Deployment) -> Iterator[Finding]:
    for so in d.autoscalers("ScaledObject"):
        spec = so.obj.get("spec") or {}
        text = json.dumps(spec.get("triggers") or [])
        if spec.get("minReplicaCount", 0) == 0 and not IN_FLIGHT.search(text):
            yield d.finding(
                "RC010",
                "error",
                "spec.triggers",
                "scales to zero on a signal blind to long answers (request rate or "
                "queue length are zero while one 30-minute answer decodes)",
                "scale to zero only on in-flight sequences "
                "(vllm:num_requests_running), or keep minReplicaCount >= 1",
                on=so,
            )


@rule("RC014", "error", "ingress-nginx's proxy-read-timeout outlasts the longest silence")
def short_proxy_read_timeout(d: Deployment) -> Iterator[Finding]:
    services = {m.name for m in d.index.selecting(d.ns, "Service", d.labels)}
    key = NGINX_ANNOTATION + "proxy-read-timeout"
    silence = d.opts.longest_silence_s
    for ing in d.index.ingresses_of(d.ns, services):
        if not _ingress_services(ing) & services:
            continue
        value = seconds_annotation(ing, key)
        read = NGINX_DEFAULT_TIMEOUT_S if value is None else value
        # proxy-send-timeout times only writes to the engine (the request): measured, a
        # stream with 2.5 s silences outlived a 1 s send timeout, so it is only validated
        seconds_annotation(ing, NGINX_ANNOTATION + "proxy-send-timeout")
        if read < silence:
            set_or_default = f"{read:g} s" if value is not None else f"unset ({read} s by default)"
            yield d.finding(
                "RC014",
                "warning" if value is None else "error",
                f"metadata.annotations.{key}",
                f"proxy-read-timeout {set_or_default} is shorter than the longest expected "
                f"silence ({silence:g} s): a queued request gets headers "
                "and then no byte until admitted, and nginx closes a stream that sends "
                "nothing for that long ('upstream timed out' in its error log; the client "
                "gets a cut answer)",
                f'set {key}: "{max(3600, int(silence))}"',
                on=ing,
            )


@rule("RC011", "error", "a rollout's surge fits the namespace's GPU quota")
def surge_over_gpu_quota(d: Deployment) -> Iterator[Finding]:
    if d.opts.gpu_quota is None:
        return
    per_pod = 0
    for cc in d.pod.get("containers") or []:
        limits = (cc.get("resources") or {}).get("limits") or {}
        per_pod += int(str(limits.get("nvidia.com/gpu", 0)))
    surge, _ = strategy(d.m)
    need = (d.replicas + surge) * per_pod
    if per_pod and need > d.opts.gpu_quota:
        yield d.finding(
            "RC011",
            "error",
            "spec.strategy.rollingUpdate.maxSurge",
            f"a rollout needs {need} GPUs ({d.replicas} replicas + {surge} surge x "
            f"{per_pod}), above the quota of {d.opts.gpu_quota}: surge pods stay Pending",
            "lower maxSurge (and allow maxUnavailable >= 1), or raise the quota",
        )


UNREACHABLE = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
DEFAULT_TOLERATION_S = 300  # the DefaultTolerationSeconds admission plugin's


@rule("RC017", "warning", "a lost node's engine pods are replaced before the default 300 s")
def default_unreachable_toleration(d: Deployment) -> Iterator[Finding]:
    tolerations = d.pod.get("tolerations") or []

    def bound(key: str) -> float | None:
        for t in tolerations:
            if not isinstance(t, dict) or t.get("effect") not in (None, "NoExecute"):
                continue
            if t.get("key") == key or (t.get("key") is None and t.get("operator") == "Exists"):
                return t.get("tolerationSeconds")  # None: tolerated for ever
        return DEFAULT_TOLERATION_S

    slow = [k for k in UNREACHABLE if (s := bound(k)) is None or float(s) >= DEFAULT_TOLERATION_S]
    if slow:
        yield d.finding(
            "RC017",
            "warning",
            "spec.template.spec.tolerations",
            f"{' and '.join(slow)} tolerated for {DEFAULT_TOLERATION_S} s or more (the "
            "admission's default): the engines of a node that lost power stay bound to it, "
            "their capacity gone and not replaced, for 5 minutes after the node controller "
            "marks it (40-50 s), and a replacement's own start-up comes on top",
            "tolerate them with effect NoExecute and tolerationSeconds about 30, so that the "
            "replacements start sooner (a node back within that keeps its pods)",
        )


@rule("RC019", "error", "the memory limit holds the engine's KV cache in host memory")
def memory_below_kv_cache(d: Deployment) -> Iterator[Finding]:
    env = {e.get("name"): e.get("value") for e in d.c.get("env") or [] if isinstance(e, dict)}
    kv = env.get("VLLM_CPU_KVCACHE_SPACE")
    limit = ((d.c.get("resources") or {}).get("limits") or {}).get("memory")
    if kv is None or limit is None:
        return
    try:
        kv_gib = float(kv)
    except ValueError:
        return
    limit_gib = memory_gib(limit)
    if limit_gib is not None and limit_gib <= kv_gib:
        yield d.finding(
            "RC019",
            "error",
            f"{d.cpath}.resources.limits.memory",
            f"the memory limit {limit} is not above VLLM_CPU_KVCACHE_SPACE ({kv_gib:g} GiB): "
            "the engine's KV cache alone fills it, and the kernel OOMKills the engine "
            "mid-decode (every stream on it lost) once the cache fills under load",
            "raise limits.memory above the KV cache space plus the weights and the "
            "server's own memory, or lower VLLM_CPU_KVCACHE_SPACE",
        )


@rule("RC020", "warning", "engine pods outrank the preemptible work beside them")
def below_preemptible_work(d: Deployment) -> Iterator[Finding]:
    """A PodDisruptionBudget does not stop a preemption: the scheduler takes a pod of a
    lower priority when a higher one needs its node (its GPUs), and goes past the PDB when
    no other victim frees enough. Where the objects beside the Deployment show priorities
    in use (PriorityClasses of the cluster's own, workloads that name one), an engine pod
    at priority 0, or at or below another workload's class, is the first to go."""
    classes, users = d.index.priority_classes, d.index.priority_users
    others = [(m, c) for m, c in users if m is not d.m]
    if not classes and not others:
        return  # nothing says priorities are in use here
    default = max((v for v, is_default in classes.values() if is_default), default=0.0)
    own = d.pod.get("priorityClassName")
    value = classes.get(own, (None, False))[0] if own else default
    above = [(m, c, classes[c][0]) for m, c in others if c in classes]
    if value is not None:
        above = [(m, c, v) for m, c, v in above if v >= value]
    elif own:
        return  # its class's value is not among these objects: nothing to compare
    if not own:
        named = sorted({c for _, c in others} | set(classes))
        yield d.finding(
            "RC020",
            "warning",
            "spec.template.spec.priorityClassName",
            f"the engine pods name no PriorityClass (priority {default:g}) while "
            f"{', '.join(named[:4])} {'is' if len(named) == 1 else 'are'} in use beside "
            "them: a pod of a higher class that needs their node's GPUs preempts an engine "
            "mid-answer, past its PodDisruptionBudget when no other victim frees enough",
            "give the engine pods a PriorityClass above the preemptible work that shares "
            "their nodes (batch, training, notebooks), and keep the preemptible work's "
            "below it",
        )
    elif above:
        m, c, v = above[0]
        yield d.finding(
            "RC020",
            "warning",
            "spec.template.spec.priorityClassName",
            f"the engine pods' PriorityClass {own} ({value:g}) is not above {m.ref}'s "
            f"{c} ({v:g}): that workload's pods can preempt an engine mid-answer, past its "
            "PodDisruptionBudget when no other victim frees enough",
            f"raise {own} above the classes of the work that may share the engines' nodes, "
            "or give that work a class below it",
        )
