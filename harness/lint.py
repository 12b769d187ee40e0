"""Preflight rules for inference Deployments, from how vLLM, nginx and Kubernetes behave.

Reads Kubernetes YAML (files, folders, multi-document, or `-` for stdin such as
kustomize output), finds each inference Deployment (by engine image or command),
and checks it with its PDB, HPA, KEDA ScaledObject and Service. Pure functions
from parsed manifests to findings; only `load_manifests` touches files.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import asdict, dataclass, field
from itertools import combinations
from pathlib import Path

from harness import rollout_math
from harness.errors import RollcheckError
from harness.yamlsafe import YamlInputError, load_documents

SEVERITIES = ("info", "warning", "error")
DEFAULT_ENGINE_IMAGES = [r"vllm", r"sglang", r"text-generation-inference", r"rollcheck[/-]sim"]
DEFAULT_ENGINE_COMMANDS = [
    r"vllm(\s+serve|\.entrypoints)",
    r"sglang\.launch_server",
    r"rollcheck\s+sim",
    r"harness\.cli\s+sim",
]
GPU_UTIL = re.compile(
    r"DCGM_FI_DEV_GPU_UTIL|gpu_util|nvidia_gpu_duty_cycle|gpu_utilization", re.IGNORECASE
)
IN_FLIGHT = re.compile(r"num_requests_running|num_running_reqs", re.IGNORECASE)
DEFAULT_GRACE_S = 30
SHELLS = re.compile(r"(^|/)(sh|bash|dash|ash|zsh)$")
COMPOUND = re.compile(r"[;&|\n`]|\$\(")  # more than one simple command in a shell script
NGINX_ANNOTATION = "nginx.ingress.kubernetes.io/"
NGINX_DEFAULT_TIMEOUT_S = 60  # ingress-nginx proxy-read-timeout / proxy-send-timeout
# Caps on the grace period that some node operations honour, whatever the pod asks for.
GRACE_CAPS = (
    (3600, "GKE node upgrades honour terminationGracePeriodSeconds for at most one hour"),
    (600, "cluster-autoscaler's scale-down waits at most --max-graceful-termination-sec (600 s)"),
)

# Known fields, so that a typo (`replica: 3`) is an error rather than silently ignored.
DEPLOYMENT_SPEC = {
    "replicas",
    "selector",
    "template",
    "strategy",
    "minReadySeconds",
    "revisionHistoryLimit",
    "paused",
    "progressDeadlineSeconds",
}
POD_SPEC = {
    "containers",
    "initContainers",
    "volumes",
    "terminationGracePeriodSeconds",
    "serviceAccountName",
    "serviceAccount",
    "nodeSelector",
    "affinity",
    "tolerations",
    "securityContext",
    "imagePullSecrets",
    "priorityClassName",
    "restartPolicy",
    "hostNetwork",
    "dnsPolicy",
    "runtimeClassName",
    "schedulerName",
    "topologySpreadConstraints",
    "shareProcessNamespace",
    "hostIPC",
    "hostPID",
    "automountServiceAccountToken",
    "enableServiceLinks",
    "ephemeralContainers",
    "activeDeadlineSeconds",
    "hostname",
    "subdomain",
    "dnsConfig",
    "hostAliases",
    "overhead",
    "preemptionPolicy",
    "readinessGates",
    "resourceClaims",
    "resources",
    "os",
    "hostUsers",
    "schedulingGates",
    "setHostnameAsFQDN",
    "nodeName",
}
CONTAINER = {
    "name",
    "image",
    "command",
    "args",
    "env",
    "envFrom",
    "ports",
    "resources",
    "volumeMounts",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "imagePullPolicy",
    "securityContext",
    "workingDir",
    "stdin",
    "stdinOnce",
    "tty",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "volumeDevices",
    "resizePolicy",
    "restartPolicy",
}


class LintInputError(RollcheckError, ValueError):
    """Input that cannot be linted: one line naming the file and the document."""


@dataclass
class Manifest:
    obj: dict
    file: str
    doc: int  # 1-based document index in the file
    line: int  # line of the document's start

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def metadata(self) -> dict:
        meta = self.obj.get("metadata")
        return meta if isinstance(meta, dict) else {}

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", "?"))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace") or "default")

    @property
    def ref(self) -> str:
        return f"{_printable(self.kind)}/{_printable(self.name)}"


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
    engine_images: list[str] = field(default_factory=lambda: list(DEFAULT_ENGINE_IMAGES))
    engine_commands: list[str] = field(default_factory=lambda: list(DEFAULT_ENGINE_COMMANDS))
    min_startup_s: float = 600.0  # weight loading on a GPU node takes minutes
    # the longest time an answer may send nothing: a queued request gets its headers and
    # then no byte until admitted; a long prompt's prefill sends nothing either
    longest_silence_s: float = 120.0
    longest_answer_s: float | None = None  # the longest answer the service must finish
    gpu_quota: int | None = None  # nvidia.com/gpu the namespace may use


# --- input -----------------------------------------------------------------------
MAX_MANIFEST_BYTES = 16 << 20  # a manifest file of many objects is a few hundred kB
MAX_MANIFEST_NODES = 2_000_000  # values in one document, aliases expanded


def load_manifests(paths: list[str], warn=None) -> list[Manifest]:
    """The objects in the files and folders given; a folder's entries that are not regular
    files (FIFOs, sockets, devices, links to them) are skipped with one line to `warn`."""
    warn = warn or (lambda line: print(f"rollcheck lint: {line}", file=sys.stderr))
    out: list[Manifest] = []
    for p in paths:
        if p == "-":
            out += parse_documents(sys.stdin.buffer.read(MAX_MANIFEST_BYTES + 1), "<stdin>")
            continue
        path = Path(p)
        if path.is_dir():
            files = []
            for f in sorted(path.rglob("*")):
                if f.suffix not in (".yaml", ".yml"):
                    continue
                if f.is_file():
                    files.append(f)
                elif not f.is_dir():
                    warn(f"skipped {f}: not a regular file")
        elif path.is_file():
            files = [path]
        elif path.exists():
            raise LintInputError(f"{p}: not a regular file or a folder; give YAML files")
        else:
            raise LintInputError(f"{p}: no such file or folder")
        for f in files:
            size = f.stat().st_size
            if size > MAX_MANIFEST_BYTES:
                raise LintInputError(
                    f"{f}: {size} bytes, over the {MAX_MANIFEST_BYTES} lint reads in one file; "
                    "split it"
                )
            try:
                data = f.read_bytes()
            except OSError as exc:
                raise LintInputError(f"{f}: cannot read it ({exc.strerror})") from None
            out += parse_documents(data, str(f))
    return out


def parse_documents(text: str | bytes, name: str) -> list[Manifest]:
    if len(text) > MAX_MANIFEST_BYTES:
        raise LintInputError(f"{name}: over the {MAX_MANIFEST_BYTES} bytes lint reads in one file")
    out = []
    try:
        for i, (line, obj) in enumerate(
            load_documents(text, name, MAX_MANIFEST_NODES, numbered=True), 1
        ):
            if not isinstance(obj, dict):
                raise LintInputError(f"{name}: document {i}: not a Kubernetes object (a mapping)")
            if obj.get("kind") == "List":
                items = obj.get("items") or []
                if not isinstance(items, list):
                    raise LintInputError(f"{name}: document {i}: items is not a list")
                for item in items:
                    if not isinstance(item, dict):
                        raise LintInputError(f"{name}: document {i}: an item is not an object")
                    out.append(Manifest(item, name, i, line))
            else:
                out.append(Manifest(obj, name, i, line))
    except YamlInputError as exc:
        raise LintInputError(str(exc)) from None
    return out


# --- helpers ---------------------------------------------------------------------
def _pod_spec(m: Manifest) -> dict:
    """spec.template.spec, or {} where a level is missing or not a mapping (_validate
    names the wrong one)."""
    node = m.obj
    for key in ("spec", "template", "spec"):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _printable(text: str) -> str:
    return text if text.isprintable() else repr(text)


def _first(keys: set) -> str:
    """The first of some field names, fit for a one-line message (a name with a line break
    or of another type is shown quoted)."""
    name = sorted(keys, key=str)[0]
    return _printable(name) if isinstance(name, str) and name.strip() == name else repr(name)


def _validate(m: Manifest) -> None:
    where = f"{m.file}: document {m.doc} ({m.ref})"
    spec = m.obj.get("spec")
    if not isinstance(spec, dict):
        raise LintInputError(f"{where}: has no spec")
    unknown = set(spec) - DEPLOYMENT_SPEC
    if unknown:
        raise LintInputError(f"{where}: unknown field spec.{_first(unknown)}")
    template = spec.get("template")
    if template is not None and not isinstance(template, dict):
        raise LintInputError(
            f"{where}: spec.template must be a mapping, not {type(template).__name__}"
        )
    pod = (template or {}).get("spec")
    if pod is not None and not isinstance(pod, dict):
        raise LintInputError(
            f"{where}: spec.template.spec must be a mapping, not {type(pod).__name__}"
        )
    pod = _pod_spec(m)
    unknown = set(pod) - POD_SPEC
    if unknown:
        raise LintInputError(f"{where}: unknown field spec.template.spec.{_first(unknown)}")
    replicas = spec.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise LintInputError(f"{where}: spec.replicas must be a whole number, not {replicas!r}")
    grace = pod.get("terminationGracePeriodSeconds", 0)
    if isinstance(grace, bool) or not isinstance(grace, (int, float)):
        raise LintInputError(
            f"{where}: spec.template.spec.terminationGracePeriodSeconds must be a number, "
            f"not {grace!r}"
        )
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers:
        raise LintInputError(f"{where}: has no containers (spec.template.spec.containers)")
    for i, c in enumerate(containers):
        cwhere = f"{where}: spec.template.spec.containers[{i}]"
        if not isinstance(c, dict):
            raise LintInputError(f"{cwhere} is not an object")
        for key in ("command", "args"):
            value = c.get(key)
            if value is not None and not (
                isinstance(value, list) and all(isinstance(x, (str, int, float)) for x in value)
            ):
                raise LintInputError(
                    f"{cwhere}.{key} must be a list of strings, not {type(value).__name__} "
                    f'{str(value)[:40]!r} (e.g. {key}: ["vllm", "serve"])'
                )
        unknown = set(c) - CONTAINER
        if unknown:
            raise LintInputError(
                f"{where}: unknown field spec.template.spec.containers[{i}].{_first(unknown)}"
            )
    for key, value in _numbers(m.obj):
        if value < 0:
            raise LintInputError(f"{where}: {key} cannot be negative ({value})")
    ru = (spec.get("strategy") or {}).get("rollingUpdate") or {}
    for key in ("maxSurge", "maxUnavailable"):
        if key in ru:
            int_or_percent(ru[key], f"{where}: spec.strategy.rollingUpdate.{key}")


def int_or_percent(value, where: str) -> tuple[float, bool]:
    """Kubernetes' IntOrString: 2 or "25%". Returns (number, is_percent)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return float(value), False
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("%") and _num(text[:-1]) is not None and _num(text[:-1]) >= 0:
            return float(text[:-1]), True
        if text.isdigit():
            return float(text), False
    raise LintInputError(
        f"{where}: {value!r} is neither a whole number nor a percentage such as 25%"
    )


def _numbers(obj, prefix=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _numbers(v, f"{prefix}[{i}]")
    elif (
        isinstance(obj, (int, float))
        and not isinstance(obj, bool)
        and (prefix.endswith(("Seconds", "Threshold", "replicas", "Replicas", "seconds")))
    ):
        yield prefix, obj


def _command_line(c: dict) -> str:
    return " ".join(str(x) for x in (c.get("command") or []) + (c.get("args") or []))


def engine_container(m: Manifest, opts: LintOptions) -> tuple[int, dict] | None:
    for i, c in enumerate(_pod_spec(m).get("containers") or []):
        image = str(c.get("image", ""))
        cmd = _command_line(c)
        if any(re.search(p, image) for p in opts.engine_images) or any(
            re.search(p, cmd) for p in opts.engine_commands
        ):
            return i, c
    return None


def shutdown_timeout_s(c: dict) -> float | None:
    """vLLM's --shutdown-timeout (the simulator takes the same flag)."""
    words = []
    for part in (c.get("command") or []) + (c.get("args") or []):
        try:
            words += shlex.split(str(part))
        except ValueError:
            words.append(str(part))
    for i, w in enumerate(words):
        if w == "--shutdown-timeout" and i + 1 < len(words):
            return _num(words[i + 1])
        if w.startswith("--shutdown-timeout="):
            return _num(w.split("=", 1)[1])
    return None


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def prestop_sleep_s(c: dict) -> float | None:
    pre = ((c.get("lifecycle") or {}).get("preStop")) or {}
    if "sleep" in pre:  # Kubernetes 1.30+ sleep action
        return _num(str((pre.get("sleep") or {}).get("seconds", "")))
    cmd = " ".join(str(x) for x in ((pre.get("exec") or {}).get("command") or []))
    m = re.search(r"\bsleep\s+(\d+(?:\.\d+)?)", cmd)
    return float(m.group(1)) if m else None


def probe_window_s(probe: dict | None) -> float | None:
    if not probe:
        return None
    return float(probe.get("failureThreshold", 3)) * float(probe.get("periodSeconds", 10))


def _strategy(m: Manifest) -> tuple[int, int]:
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


def _seconds_annotation(m: Manifest, key: str) -> float | None:
    value = ((m.obj.get("metadata") or {}).get("annotations") or {}).get(key)
    if value is None:
        return None
    n = _num(str(value).strip().removesuffix("s"))
    if n is None or n < 0:
        raise LintInputError(
            f"{m.file}: document {m.doc} ({m.ref}): metadata.annotations.{key} {value!r} is "
            "not a number of seconds"
        )
    return n


def _ingress_services(ing: Manifest) -> set[str]:
    spec = ing.obj.get("spec") or {}
    backends = [spec.get("defaultBackend") or {}]
    for rule in spec.get("rules") or []:
        backends += [
            p.get("backend") or {} for p in ((rule or {}).get("http") or {}).get("paths") or []
        ]
    return {((b.get("service") or {}).get("name")) for b in backends} - {None}


def _is_ingress_nginx(ing: Manifest) -> bool:
    cls = str((ing.obj.get("spec") or {}).get("ingressClassName") or "")
    annotations = (ing.obj.get("metadata") or {}).get("annotations") or {}
    return "nginx" in cls or any(str(k).startswith(NGINX_ANNOTATION) for k in annotations)


def _match_labels(selector) -> dict:
    """A selector's labels: matchLabels (a PDB's), or the selector itself (a Service's)."""
    if not isinstance(selector, dict):
        return {}
    match = selector.get("matchLabels") or selector
    return match if isinstance(match, dict) else {}


def _targets(obj: dict, deployment: Manifest) -> bool:
    ref = (obj.get("spec") or {}).get("scaleTargetRef") or {}
    return ref.get("name") == deployment.name and ref.get("kind", "Deployment") == "Deployment"


class _Index:
    """The objects a Deployment's rules look up, found by what they are looked up by, so
    lint's time grows with the number of objects, not with its square."""

    def __init__(self, manifests: list[Manifest]):
        self.selectors: dict[tuple[str, str], dict[frozenset, list]] = {}
        self.targets: dict[tuple[str, str, object], list] = {}
        self.ingresses: dict[tuple[str, str], list] = {}
        self.service_names: dict[tuple[str, str], Manifest] = {}
        for pos, m in enumerate(manifests):
            spec = m.obj.get("spec")
            spec = spec if isinstance(spec, dict) else {}
            ns, kind = m.namespace, m.kind
            if kind == "Service" and isinstance(m.obj.get("metadata"), dict):
                name = m.obj["metadata"].get("name")
                if isinstance(name, str):
                    self.service_names.setdefault((ns, name), m)
            if kind in ("PodDisruptionBudget", "Service"):
                match = _match_labels(spec.get("selector"))
                if match:
                    key = frozenset((k, v) for k, v in match.items() if isinstance(v, str))
                    self.selectors.setdefault((ns, kind), {}).setdefault(key, []).append((pos, m))
            elif kind in ("HorizontalPodAutoscaler", "ScaledObject"):
                ref = spec.get("scaleTargetRef")
                name = ref.get("name") if isinstance(ref, dict) else None
                if isinstance(name, str):
                    self.targets.setdefault((ns, kind, name), []).append((pos, m))
            elif kind == "Ingress" and _is_ingress_nginx(m):
                for svc in _ingress_services(m):
                    self.ingresses.setdefault((ns, svc), []).append((pos, m))

    def selecting(self, ns: str, kind: str, labels: dict) -> list[Manifest]:
        """The kind's objects in ns whose selector matches these pod labels, in file order."""
        table = self.selectors.get((ns, kind)) or {}
        items = sorted((k, v) for k, v in labels.items() if isinstance(v, str))
        if len(items) > 12 or len(table) < 2 ** len(items):
            keys = [k for k in table if k <= set(items)]
        else:  # every subset of the pod's labels is a selector that would match
            keys = [frozenset(c) for r in range(len(items) + 1) for c in combinations(items, r)]
        found = [x for k in keys for x in table.get(k, ())]
        return [m for _, m in sorted(found, key=lambda x: x[0])]

    def targeting(self, ns: str, kind: str, name: str) -> list[Manifest]:
        return [m for _, m in self.targets.get((ns, kind, name), ())]

    def ingresses_of(self, ns: str, services: set[str]) -> list[Manifest]:
        found = {pos: m for s in services for pos, m in self.ingresses.get((ns, s), ())}
        return [found[pos] for pos in sorted(found)]


# --- the rules ---------------------------------------------------------------------
def lint(manifests: list[Manifest], opts: LintOptions | None = None) -> list[Finding]:
    opts = opts or LintOptions()
    findings: list[Finding] = []
    try:
        index = _Index(manifests)  # each Deployment's neighbours, found once
    except (TypeError, AttributeError, ValueError) as exc:
        raise LintInputError(
            f"a PDB, Service, autoscaler or Ingress with a field of a type Kubernetes does not "
            f"accept ({type(exc).__name__}: {str(exc)[:80]})"
        ) from None
    for d in (m for m in manifests if m.kind == "Deployment"):
        try:
            _validate(d)
            found = engine_container(d, opts)
            if found is None:
                continue
            idx, c = found
            findings += _lint_deployment(d, idx, c, index, opts)
        except (TypeError, AttributeError, ValueError, KeyError) as exc:
            if isinstance(exc, LintInputError):
                raise
            raise LintInputError(
                f"{d.file}: document {d.doc} ({d.ref}) or an object beside it: a field of a "
                f"type Kubernetes does not accept ({type(exc).__name__}: {str(exc)[:80]})"
            ) from None
    return findings


def _lint_deployment(
    d: Manifest, idx: int, c: dict, index: _Index, opts: LintOptions
) -> list[Finding]:
    out: list[Finding] = []
    cpath = f"spec.template.spec.containers[{idx}]"

    def add(rule, severity, path, why, fix):
        out.append(Finding(rule, severity, d.ref, path, why, fix, d.file, d.line))

    pod = _pod_spec(d)
    replicas = int((d.obj.get("spec") or {}).get("replicas", 1))
    grace = float(pod.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S))
    timeout = shutdown_timeout_s(c)
    prestop = prestop_sleep_s(c)
    startup = c.get("startupProbe")

    if not startup:
        add(
            "RC001",
            "error",
            f"{cpath}.startupProbe",
            "no startupProbe: liveness and readiness probes run while weights load (minutes), "
            "and a liveness failure restarts the engine before it ever serves",
            "add a startupProbe on /health with failureThreshold x periodSeconds above the "
            "longest weight-loading time",
        )
    elif probe_window_s(startup) < opts.min_startup_s:
        add(
            "RC002",
            "warning",
            f"{cpath}.startupProbe",
            f"the startupProbe allows {probe_window_s(startup):g} s to start, less than "
            f"{opts.min_startup_s:g} s expected for weight loading",
            "raise failureThreshold (or periodSeconds) so the window covers the slowest start",
        )
    live, ready = c.get("livenessProbe"), c.get("readinessProbe")
    if live and ready and probe_window_s(live) <= probe_window_s(ready):
        add(
            "RC003",
            "warning",
            f"{cpath}.livenessProbe",
            "liveness is as strict as readiness: a busy engine that misses a few probes is "
            "restarted (losing every stream) instead of only taken out of endpoints",
            "make liveness more lenient than readiness (higher failureThreshold x periodSeconds)",
        )
    if not timeout:
        add(
            "RC005",
            "error",
            f"{cpath}.args",
            "the engine's --shutdown-timeout is unset or 0: at SIGTERM vLLM aborts every "
            "in-flight request (finish_reason abort)",
            "set --shutdown-timeout to about the p99 answer time (llm-d uses 45 s)",
        )
    if prestop is None:
        add(
            "RC006",
            "warning",
            f"{cpath}.lifecycle.preStop",
            "no preStop sleep: SIGTERM arrives while gateways still route to the pod, and "
            "vLLM accepts then aborts those new requests",
            "add a preStop sleep longer than endpoint propagation (llm-d and KServe use 15 s)",
        )
    need = (prestop or 0) + (timeout or 0)
    if grace <= need:
        add(
            "RC004",
            "error",
            "spec.template.spec.terminationGracePeriodSeconds",
            f"terminationGracePeriodSeconds {grace:g} s is not above preStop {prestop or 0:g} s + "
            f"shutdown timeout {timeout or 0:g} s: streams still draining are SIGKILLed",
            f"set terminationGracePeriodSeconds above {need:g} s (llm-d: preStop 15, timeout 45, "
            "grace 75)",
        )

    wrapper = shell_wrapper(c, opts)
    if wrapper and wrapper[0] == "compound":
        add(
            "RC012",
            "error",
            f"{cpath}.command",
            "the engine runs under a shell script of several commands without `exec`: the "
            "shell is PID 1 and takes the kubelet's SIGTERM (a shell does not pass it on), so "
            "the engine never drains and is SIGKILLed at the end of the grace period",
            "start the engine with `exec` as the script's last command (exec vllm serve ...), "
            "or put the engine in command/args directly",
        )
    elif wrapper and wrapper[0] == "simple":
        add(
            "RC012",
            "warning",
            f"{cpath}.command",
            f"the engine is started by `{wrapper[1][:60]}` under a shell without `exec`: only "
            "a shell that happens to exec a lone command (bash does) lets SIGTERM reach it",
            "write `exec` before the engine command, or drop the shell",
        )
    elif wrapper:
        add(
            "RC012",
            "warning",
            f"{cpath}.command",
            f"the engine is started by the script {wrapper[1]}: SIGTERM reaches the engine "
            "only if the script ends in `exec <engine> ...`, which rollcheck cannot see",
            "end the script with `exec vllm serve ...` (or use tini/dumb-init to forward signals)",
        )
    vllm_service = index.service_names.get((d.namespace, "vllm"))
    if vllm_service is not None and pod.get("enableServiceLinks", True) is not False:
        add(
            "RC016",
            "error",
            "spec.template.spec.enableServiceLinks",
            f"the Service {vllm_service.ref} gives every pod of the namespace "
            "VLLM_PORT=tcp://<service IP>:<port> (service links), and vLLM reads VLLM_PORT "
            "as its own setting: the engine core fails to start ('VLLM_PORT ... appears to "
            "be a URI')",
            "set enableServiceLinks: false in the pod template, or name the Service "
            "otherwise than vllm",
        )
    if "terminationGracePeriodSeconds" in pod:
        for cap, who in GRACE_CAPS:
            if grace > cap:
                add(
                    "RC015",
                    "warning",
                    "spec.template.spec.terminationGracePeriodSeconds",
                    f"terminationGracePeriodSeconds {grace:g} s is above {cap} s: {who}, so "
                    "answers the grace period was meant to cover are cut there",
                    f"keep answers (preStop + shutdown timeout) under {cap} s, or drain the "
                    "node yourself before the operation",
                )
                break
    if opts.longest_answer_s is not None and grace < (prestop or 0) + opts.longest_answer_s:
        add(
            "RC015",
            "error",
            "spec.template.spec.terminationGracePeriodSeconds",
            f"terminationGracePeriodSeconds {grace:g} s is below preStop {prestop or 0:g} s + "
            f"the longest expected answer ({opts.longest_answer_s:g} s): the longest answers "
            "in flight at a drain are SIGKILLed",
            f"set terminationGracePeriodSeconds (and --shutdown-timeout) to cover "
            f"{(prestop or 0) + opts.longest_answer_s:g} s",
        )

    labels = (((d.obj.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
        "labels"
    ) or {}
    ns = d.namespace
    surge, unavailable = _strategy(d)
    for pdb in index.selecting(ns, "PodDisruptionBudget", labels):
        spec = pdb.obj.get("spec") or {}
        min_av, max_un = spec.get("minAvailable"), spec.get("maxUnavailable")
        where = f"{pdb.file}: document {pdb.doc} ({pdb.ref})"
        if min_av is not None:
            n, percent = int_or_percent(min_av, f"{where}: spec.minAvailable")
            # Kubernetes rounds a minAvailable percentage up
            if percent and 0 < n < 100 and -(-n * replicas // 100) >= replicas:
                out.append(
                    Finding(
                        "RC013",
                        "error",
                        pdb.ref,
                        "spec.minAvailable",
                        f"minAvailable {min_av} of {replicas} replicas rounds up to "
                        f"{int(-(-n * replicas // 100))} (Kubernetes rounds it up): no pod of "
                        f"{d.ref} may be evicted, so node drains and scale-downs block",
                        f"use maxUnavailable: 1, or a percentage that leaves one replica "
                        f"(at most {100 * (replicas - 1) // replicas}% of {replicas})",
                        pdb.file,
                        pdb.line,
                    )
                )
        if max_un is not None:
            int_or_percent(max_un, f"{where}: spec.maxUnavailable")
        blocks = (
            min_av == "100%"
            or (isinstance(min_av, int) and min_av >= replicas)
            or max_un in (0, "0", "0%")
        )
        if blocks:
            out.append(
                Finding(
                    "RC007",
                    "error",
                    pdb.ref,
                    "spec",
                    f"the PDB allows no voluntary disruption of {d.ref} ({replicas} replicas): every "
                    "node drain and autoscaler scale-down blocks on it (HTTP 429), while the rollout "
                    f"itself may take {unavailable} pod(s) down",
                    "allow one disruption (maxUnavailable: 1, or minAvailable: replicas - 1)",
                    pdb.file,
                    pdb.line,
                )
            )
    hpas = index.targeting(ns, "HorizontalPodAutoscaler", d.name)
    for hpa in (m for m in hpas if _targets(m.obj, d)):
        text = json.dumps(hpa.obj.get("spec") or {})
        if GPU_UTIL.search(text):
            out.append(
                Finding(
                    "RC008",
                    "error",
                    hpa.ref,
                    "spec.metrics",
                    "scales on GPU utilisation: one decoding request saturates a GPU, "
                    "so the signal says nothing about load",
                    "scale on queue length (vllm:num_requests_waiting) or in-flight "
                    "requests per replica",
                    hpa.file,
                    hpa.line,
                )
            )
        window = (((hpa.obj.get("spec") or {}).get("behavior") or {}).get("scaleDown") or {}).get(
            "stabilizationWindowSeconds"
        )
        if window is None or (timeout and window < timeout):
            out.append(
                Finding(
                    "RC009",
                    "warning",
                    hpa.ref,
                    "spec.behavior.scaleDown.stabilizationWindowSeconds",
                    f"scale-down cooldown {window if window is not None else 'unset'} "
                    f"is shorter than the engine's shutdown timeout ({timeout or 0:g} s), "
                    "the expected longest answer",
                    "set a scale-down stabilization window at least as long as the longest answer",
                    hpa.file,
                    hpa.line,
                )
            )
    scaled = index.targeting(ns, "ScaledObject", d.name)
    for so in (m for m in scaled if _targets(m.obj, d)):
        spec = so.obj.get("spec") or {}
        text = json.dumps(spec.get("triggers") or [])
        if GPU_UTIL.search(text):
            out.append(
                Finding(
                    "RC008",
                    "error",
                    so.ref,
                    "spec.triggers",
                    "scales on GPU utilisation: one decoding request saturates a GPU",
                    "scale on queue length or in-flight requests",
                    so.file,
                    so.line,
                )
            )
        cooldown = spec.get("cooldownPeriod", 300)
        if timeout and cooldown < timeout:
            out.append(
                Finding(
                    "RC009",
                    "warning",
                    so.ref,
                    "spec.cooldownPeriod",
                    f"cooldownPeriod {cooldown} s is shorter than the engine's shutdown "
                    f"timeout ({timeout:g} s)",
                    "set cooldownPeriod at least as long as the longest answer",
                    so.file,
                    so.line,
                )
            )
        if spec.get("minReplicaCount", 0) == 0 and not IN_FLIGHT.search(text):
            out.append(
                Finding(
                    "RC010",
                    "error",
                    so.ref,
                    "spec.triggers",
                    "scales to zero on a signal blind to long answers (request rate or "
                    "queue length are zero while one 30-minute answer decodes)",
                    "scale to zero only on in-flight sequences "
                    "(vllm:num_requests_running), or keep minReplicaCount >= 1",
                    so.file,
                    so.line,
                )
            )
    services = {m.name for m in index.selecting(ns, "Service", labels)}
    for ing in index.ingresses_of(ns, services):
        if not _ingress_services(ing) & services:
            continue
        key = NGINX_ANNOTATION + "proxy-read-timeout"
        value = _seconds_annotation(ing, key)
        read = NGINX_DEFAULT_TIMEOUT_S if value is None else value
        # proxy-send-timeout times only writes to the engine (the request): measured, a
        # stream with 2.5 s silences outlived a 1 s send timeout, so it is only validated
        _seconds_annotation(ing, NGINX_ANNOTATION + "proxy-send-timeout")
        if read < opts.longest_silence_s:
            set_or_default = f"{read:g} s" if value is not None else f"unset ({read} s by default)"
            out.append(
                Finding(
                    "RC014",
                    "warning" if value is None else "error",
                    ing.ref,
                    f"metadata.annotations.{key}",
                    f"proxy-read-timeout {set_or_default} is shorter than the longest expected "
                    f"silence ({opts.longest_silence_s:g} s): a queued request gets headers "
                    "and then no byte until admitted, and nginx closes a stream that sends "
                    "nothing for that long ('upstream timed out' in its error log; the client "
                    "gets a cut answer)",
                    f'set {key}: "{max(3600, int(opts.longest_silence_s))}"',
                    ing.file,
                    ing.line,
                )
            )
    if opts.gpu_quota is not None:
        per_pod = 0
        for cc in pod.get("containers") or []:
            limits = (cc.get("resources") or {}).get("limits") or {}
            per_pod += int(str(limits.get("nvidia.com/gpu", 0)))
        need_gpus = (replicas + surge) * per_pod
        if per_pod and need_gpus > opts.gpu_quota:
            add(
                "RC011",
                "error",
                "spec.strategy.rollingUpdate.maxSurge",
                f"a rollout needs {need_gpus} GPUs ({replicas} replicas + {surge} surge x "
                f"{per_pod}), above the quota of {opts.gpu_quota}: surge pods stay Pending",
                "lower maxSurge (and allow maxUnavailable >= 1), or raise the quota",
            )
    return out


# --- output ------------------------------------------------------------------------
def format_text(findings: list[Finding]) -> str:
    if not findings:
        return "no findings"
    lines = []
    for f in findings:
        lines.append(f"{f.file}:{f.line}: {f.severity} {f.rule} {f.object} {f.path}")
        lines.append(f"    why: {f.why}")
        lines.append(f"    fix: {f.fix}")
    return "\n".join(lines)


def format_github(findings: list[Finding]) -> str:
    level = {"error": "error", "warning": "warning", "info": "notice"}
    return "\n".join(
        f"::{level[f.severity]} file={f.file},line={f.line},title={f.rule} {f.object}::"
        f"{f.path}: {f.why}. Fix: {f.fix}"
        for f in findings
    )


def exit_code(findings: list[Finding], fail_on: str = "error") -> int:
    threshold = SEVERITIES.index(fail_on)
    return 1 if any(SEVERITIES.index(f.severity) >= threshold for f in findings) else 0
