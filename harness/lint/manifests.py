"""lint's input: Kubernetes YAML (files, folders, multi-document, or `-` for stdin such
as kustomize output) read into `Manifest`s, and an inference Deployment's fields checked
for the types Kubernetes accepts. Only `load_manifests` touches files."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from harness.errors import RollcheckError
from harness.podspec import number
from harness.yamlsafe import YamlInputError, load_documents

NGINX_ANNOTATION = "nginx.ingress.kubernetes.io/"

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


def pod_spec(m: Manifest) -> dict:
    """spec.template.spec, or {} where a level is missing or not a mapping (_validate
    names the wrong one)."""
    node = m.obj
    for key in ("spec", "template", "spec"):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _pods_of(m: Manifest) -> dict:
    """The pod spec a workload of any kind runs (a Pod's own, a CronJob's Job template's,
    else spec.template.spec), or {}."""
    path = {"Pod": ("spec",), "CronJob": ("spec", "jobTemplate", "spec", "template", "spec")}
    node = m.obj
    for key in path.get(m.kind, ("spec", "template", "spec")):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _printable(text: str) -> str:
    return text if text.isprintable() else repr(text)


def _first(keys: set) -> str:
    """The first of some field names, fit for a one-line message (a name with a line break
    or of another type is shown quoted)."""
    name = sorted(keys, key=str)[0]
    return _printable(name) if isinstance(name, str) and name.strip() == name else repr(name)


def validate(m: Manifest) -> None:
    """The Deployment's shape, as the API server would take it: every problem found, each
    with its path, in one LintInputError (one line, problems joined by "; ")."""
    where = f"{m.file}: document {m.doc} ({m.ref})"
    spec = m.obj.get("spec")
    if not isinstance(spec, dict):
        raise LintInputError(f"{where}: has no spec")
    problems: list[str] = []
    unknown = set(spec) - DEPLOYMENT_SPEC
    if unknown:
        problems.append(f"unknown field spec.{_first(unknown)}")
    template = spec.get("template")
    if template is not None and not isinstance(template, dict):
        problems.append(f"spec.template must be a mapping, not {type(template).__name__}")
    pod = (template or {}).get("spec") if isinstance(template, dict) else None
    if pod is not None and not isinstance(pod, dict):
        problems.append(f"spec.template.spec must be a mapping, not {type(pod).__name__}")
    pod = pod_spec(m)
    unknown = set(pod) - POD_SPEC
    if unknown:
        problems.append(f"unknown field spec.template.spec.{_first(unknown)}")
    replicas = spec.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        problems.append(f"spec.replicas must be a whole number, not {replicas!r}")
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers:
        problems.append("has no containers (spec.template.spec.containers)")
        containers = []
    for i, c in enumerate(containers):
        cpath = f"spec.template.spec.containers[{i}]"
        if not isinstance(c, dict):
            problems.append(f"{cpath} is not an object")
            continue
        for key in ("command", "args"):
            value = c.get(key)
            if value is not None and not _string_list(value):
                problems.append(
                    f"{cpath}.{key} must be a list of strings, not {type(value).__name__} "
                    f'{str(value)[:40]!r} (e.g. {key}: ["vllm", "serve"])'
                )
        unknown = set(c) - CONTAINER
        if unknown:
            problems.append(f"unknown field {cpath}.{_first(unknown)}")
    problems += _wrongly_typed(m.obj)
    for key, value in _numbers(m.obj):
        if value < 0:
            problems.append(f"{key} cannot be negative ({value})")
    ru = (spec.get("strategy") or {}).get("rollingUpdate") or {}
    for key in ("maxSurge", "maxUnavailable"):
        if key in ru:
            try:
                int_or_percent(ru[key], f"spec.strategy.rollingUpdate.{key}")
            except LintInputError as exc:
                problems.append(str(exc))
    if problems:
        raise LintInputError("; ".join(f"{where}: {p}" for p in problems[:MAX_PROBLEMS]))


MAX_PROBLEMS = 20  # a file wrong everywhere is said in twenty places, not a thousand


def _string_list(value) -> bool:
    return isinstance(value, list) and all(isinstance(x, (str, int, float)) for x in value)


NUMERIC = ("Seconds", "Threshold", "replicas", "Replicas", "seconds")


def _wrongly_typed(obj, prefix: str = "") -> list[str]:
    """Fields the API server would refuse for their type, each with its path: a number
    written as text (`periodSeconds: ten`), a hook's or a probe's exec command written as
    one string (`command: "sleep 15"`, which the API refuses, not a missing sleep)."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(k, str) and k.endswith(NUMERIC) and not isinstance(v, (dict, list)):
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                    out.append(f"{path} must be a number, not {v!r}")
                    continue
            if k == "command" and prefix.endswith("exec") and not _string_list(v):
                out.append(
                    f"{path} must be a list of strings, not {type(v).__name__} "
                    f'{str(v)[:40]!r}: the API refuses it (e.g. command: ["sleep", "15"])'
                )
                continue
            out += _wrongly_typed(v, path)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _wrongly_typed(v, f"{prefix}[{i}]")
    return out


def int_or_percent(value, where: str) -> tuple[float, bool]:
    """Kubernetes' IntOrString: 2 or "25%". Returns (number, is_percent)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return float(value), False
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("%") and number(text[:-1]) is not None and number(text[:-1]) >= 0:
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
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool) and prefix.endswith(NUMERIC):
        yield prefix, obj


# --- a Deployment's neighbours ------------------------------------------------------
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


class Index:
    """The objects a Deployment's rules look up, found by what they are looked up by, so
    lint's time grows with the number of objects, not with its square."""

    def __init__(self, manifests: list[Manifest]):
        self.selectors: dict[tuple[str, str], dict[frozenset, list]] = {}
        self.targets: dict[tuple[str, str, object], list] = {}
        self.ingresses: dict[tuple[str, str], list] = {}
        self.service_names: dict[tuple[str, str], Manifest] = {}
        # PriorityClasses by name (the system's own left out: every cluster has them) ->
        # (value, globalDefault); and the workloads whose pods name a class
        self.priority_classes: dict[str, tuple[float, bool]] = {}
        self.priority_users: list[tuple[Manifest, str]] = []
        for pos, m in enumerate(manifests):
            spec = m.obj.get("spec")
            spec = spec if isinstance(spec, dict) else {}
            ns, kind = m.namespace, m.kind
            if kind == "Service" and isinstance(m.obj.get("metadata"), dict):
                name = m.obj["metadata"].get("name")
                if isinstance(name, str):
                    self.service_names.setdefault((ns, name), m)
            self._priority(m)
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

    def _priority(self, m: Manifest) -> None:
        meta = m.obj.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if m.kind == "PriorityClass":
            if isinstance(name, str) and not name.startswith("system-"):
                value = number(str(m.obj.get("value", 0))) or 0.0
                self.priority_classes[name] = (value, m.obj.get("globalDefault") is True)
            return
        used = _pods_of(m).get("priorityClassName")
        if isinstance(used, str) and used and not used.startswith("system-"):
            self.priority_users.append((m, used))

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
